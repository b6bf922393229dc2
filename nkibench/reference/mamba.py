"""mamba: the selective scan of a Mamba layer (one batch), with a state per channel and state index.

For channel c, state index s and sequence position m (state[c, s, -1] = 0):
dA = exp(delta[c, m] * A[c, s]);  dBu = delta[c, m] * B[s, m] * u[c, m];
state[c, s, m] = dA * state[c, s, m-1] + dBu;  out[c, m] = sum_s C[s, m] * state[c, s, m].

Layout (float32, row-major): delta and u are [C, M] (channels by sequence), A is [C, S], B and C are
[S, M] (shared by all channels), the output is [C, M]. Every input is drawn from N(0, 0.05) (standard
deviation 0.05). The tolerance is 3e-5: the float32 recurrence runs over the whole sequence.
"""

import numpy as np

from accelopt_core.tasks import PeakWork

VARIANTS = {"full": {"M": 7168, "C": 256, "S": 16}, "small": {"M": 1024, "C": 256, "S": 8}}
FAMILY = "scan"
RTOL = 3e-5


def make_inputs(rng: np.random.Generator, M: int, C: int, S: int) -> list[np.ndarray]:
    def draw(*shape: int) -> np.ndarray:
        return (0.05 * rng.standard_normal(shape)).astype(np.float32)

    return [draw(C, M), draw(C, M), draw(C, S), draw(S, M), draw(S, M)]  # delta, u, A, B, C


def reference(delta: np.ndarray, u: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    delta, u, a, b, c = (x.astype(np.float64) for x in (delta, u, a, b, c))
    channels, length = delta.shape
    state = np.zeros((channels, a.shape[1]))
    out = np.empty((channels, length))
    for m in range(length):  # vectorised over channels and states, sequential over the sequence
        d_a = np.exp(delta[:, m:m + 1] * a)
        d_bu = delta[:, m:m + 1] * b[:, m] * u[:, m:m + 1]
        state = d_a * state + d_bu
        out[:, m] = state @ c[:, m]
    return out.astype(np.float32)


def peak_work(delta: np.ndarray, u: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> PeakWork:
    channels, length = delta.shape
    states = a.shape[1]
    return PeakWork(mm_flops=0, vec_flops=8 * length * channels * states,
                    hbm_bytes=4 * (2 * channels * length + channels * states + 2 * states * length
                                   + channels * length))
