"""Which NKI a kernel is written for, and the deprecations and removals of the release it targets."""

from __future__ import annotations

import textwrap

from accelopt_core.nki.api_versions import api_findings, detect_version, parse_version

MODERN = """
import nki
import nki.language as nl
import nki.isa as nisa
"""


def kernel(body: str, header: str = MODERN) -> str:
    return header + "\n@nki.jit\ndef kernel(x):\n" + textwrap.indent(textwrap.dedent(body), "    ") + "    return x\n"


def test_the_version_is_the_newest_construct_used():
    assert detect_version(kernel("t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)\n")).describe() == "NKI 0.2+"
    assert detect_version(kernel("v = x.reshape_dim(1, (4, 6))\n")).minimum == (0, 4)
    found = detect_version(kernel("nl.fori_loop(0, 4, print)\ni = nisa.scalar_load(x)\n"))
    assert found.minimum == (0, 7) and found.describe() == "NKI 0.7+ (nisa.scalar_load, line 9)"
    assert detect_version(kernel("nki.lnc.core_barrier(x, (0, 1))\n", MODERN + "import nki.lnc\n")).minimum == (0, 8)


def test_a_keyword_a_later_release_added_raises_the_version():
    assert detect_version(kernel("nisa.topk(val_dst=x, idx_dst=x, src=x, n=16)\n")).minimum == (0, 6)
    found = detect_version(kernel("nisa.topk(val_dst=x, idx_dst=x, src=x, n=16, sorted=True)\n"))
    assert found.describe() == "NKI 0.7+ (nisa.topk(sorted=...), line 8)"


def test_a_legacy_kernel_is_named_so_and_gets_no_findings():
    legacy = kernel("for i in nl.affine_range(4):\n    pass\n",
                    "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n")
    assert detect_version(legacy).legacy and "neuronxcc.nki" in detect_version(legacy).describe()
    assert api_findings(legacy) == []


def test_a_removed_construct_names_the_release_and_the_replacement():
    (finding,) = api_findings(kernel("for i in nl.dynamic_range(4):\n    pass\n"))
    assert finding.code == "nki-removed" and finding.line == 8
    assert finding.message == ("nl.dynamic_range was removed in NKI 0.7: use nl.fori_loop(lower, upper, body) "
                               "(deprecated in NKI 0.6)")
    assert finding.fixed_source is None


def test_what_a_release_changed_is_only_said_when_it_is_targeted():
    source = kernel("for i in nl.affine_range(4):\n    pass\n")
    assert api_findings(source, parse_version("0.6")) == []
    (finding,) = api_findings(source, parse_version("0.7.0"))
    assert finding.code == "nki-deprecated" and "deprecated since NKI 0.7" in finding.message
    assert "for i in range(4):" in finding.fixed_source


def test_isa_sendrecv_moves_to_nki_lnc_without_its_pipe_id():
    (finding,) = api_findings(kernel("nisa.sendrecv(src=x, dst=x, send_to_rank=1, recv_from_rank=1, pipe_id=0)\n"))
    assert "nki.lnc.sendrecv" in finding.message
    fixed = finding.fixed_source
    assert "nki.lnc.sendrecv(src=x, dst=x, send_to_rank=1, recv_from_rank=1)\n" in fixed
    assert "import nki.lnc\n" in fixed and "pipe_id" not in fixed
    assert api_findings(fixed) == [] and detect_version(fixed).minimum == (0, 8)


def test_register_calls_become_scalar_calls():
    source = kernel("r = nisa.register_alloc()\nnisa.register_load(r, x)\nnisa.register_store(x, r)\n")
    alloc, load, store = api_findings(source)
    assert alloc.fixed_source is None and "NkiScalar" in alloc.message
    assert "    r = nisa.scalar_load(x)\n" in load.fixed_source
    assert "    nisa.scalar_store(x, r)\n" in store.fixed_source


def test_the_profile_shows_the_api_in_json_and_text():
    from accelopt_core.profiling import ProfileResult
    from accelopt_core.report import render

    api = detect_version(kernel("i = nisa.scalar_load(x)\n")).describe()
    result = ProfileResult(kernel="k.py", task="silu", hardware="trn2", backend="simulator", nki_api=api)
    assert ProfileResult.from_dict(result.to_dict()).nki_api == api == "NKI 0.7+ (nisa.scalar_load, line 8)"
    assert f"api       {api}" in render(result)
