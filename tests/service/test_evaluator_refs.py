"""An evaluator's own folder of client references does not outlive it (references may be confidential)."""

from __future__ import annotations

import os
import subprocess
import sys

from accelopt_core.service.evaluate import Evaluator
from accelopt_core.service.spec import EvaluatorConfig, materialize_reference


def test_close_removes_the_folder_it_made() -> None:
    evaluator = Evaluator(EvaluatorConfig())
    path = materialize_reference("def forward(x):\n    return x\n", "ref.py", evaluator.refs_root)
    assert os.path.exists(path)
    evaluator.close()
    assert not os.path.exists(evaluator.refs_root)
    evaluator.close()  # twice is harmless


def test_a_folder_given_by_the_service_is_left_to_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    evaluator = Evaluator(EvaluatorConfig(refs_root=str(tmp_path)))
    evaluator.close()
    assert tmp_path.exists()


def test_a_process_that_exits_takes_its_folder_along() -> None:
    code = ("from accelopt_core.service.evaluate import Evaluator\n"
            "from accelopt_core.service.spec import EvaluatorConfig\n"
            "evaluator = Evaluator(EvaluatorConfig())\n"
            "print(evaluator.refs_root)\n")
    folder = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert folder and not os.path.exists(folder)
