"""The server's one pass over the replies (`server_math.blocks`) as one compiled C loop.

In plain PyTorch one block of one reply costs three kernels: w_i - phi into a scratch block,
its dot product, and the weighted add into the sum, each a trip through the block and through
the interpreter. Here a 90-line C loop, compiled once per process in a private temporary
directory, does all three in one trip, four replies at a time: for each element, the four
differences w_i - phi, their squares summed, and sum += p_i * w_i. Each reply is read once, the
block of phi and of the sum once per four replies, and the pass runs near the speed of reading
the replies from memory (docs/performance.md#the-servers-pass).

The numbers are PyTorch's: the weighted add is one fused multiply-add per reply, in the order
of the replies, as PyTorch's vectorized `add_(alpha=)` computes it (on this project's machines
the sums are bitwise equal; where PyTorch runs its non-FMA kernels they differ in the last bit);
the squares are summed in float32 within a piece of a block and in float64 across pieces, as
the PyTorch pass does with its dot products.

It runs for float32 CPU tensors when the mode is "auto" (run config `server-pass`, the default)
and a C compiler ($CC, else cc, gcc or clang on the PATH) builds it; otherwise the PyTorch pass
runs (`run` returns False), and a log line says why once. The blocks are shared among
`torch.get_num_threads()` threads: ctypes releases the GIL while the loop runs. Sizes are never
taken on trust: every tensor is checked against the plan before a pointer is passed.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from logging import DEBUG, INFO, WARNING

import torch
from flwr.common import log

MODES = ("auto", "torch")
_mode = "auto"

SOURCE = r"""
#include <stdint.h>

/* Blocks [b0, b1) of a plan: block j is the pieces [first[j], first[j + 1]), piece p the
   elements [start[p], stop[p]) of tensor tensor[p]. xs[i * ntensor + t]: model i's tensor t;
   ref[t]: phi's. acc[t]: the weighted sum's (NULL: norms only): 0, then += w_i * x_i in the
   order of the models, then -= phi (minus_scale 1) or += -minus_scale * phi (else; 0: none).
   sq[i * nblock + j] (sq NULL: no norms): the sum over block j of (x_i - phi)^2. */
void blocks_f32(int64_t b0, int64_t b1, const int64_t *first, const int64_t *tensor,
                const int64_t *start, const int64_t *stop, int64_t nmodel, int64_t ntensor,
                int64_t nblock, const float *const *xs, const float *const *ref,
                float *const *acc, const double *w, double minus_scale, double *sq)
{
    for (int64_t j = b0; j < b1; j++) {
        if (acc)
            for (int64_t p = first[j]; p < first[j + 1]; p++) {
                float *a = acc[tensor[p]];
                for (int64_t k = start[p]; k < stop[p]; k++) a[k] = 0.0f;
            }
        int64_t i = 0;
        /* the screen's pass, four models a trip: the sum and phi are read once for four */
        for (; acc && sq && i + 4 <= nmodel; i += 4) {
            double total[4] = {0.0, 0.0, 0.0, 0.0};
            const float w0 = (float)w[i], w1 = (float)w[i + 1], w2 = (float)w[i + 2],
                        w3 = (float)w[i + 3];
            for (int64_t p = first[j]; p < first[j + 1]; p++) {
                const float *x0 = xs[i * ntensor + tensor[p]];
                const float *x1 = xs[(i + 1) * ntensor + tensor[p]];
                const float *x2 = xs[(i + 2) * ntensor + tensor[p]];
                const float *x3 = xs[(i + 3) * ntensor + tensor[p]];
                const float *r = ref[tensor[p]];
                float *a = acc[tensor[p]];
                float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
                #pragma omp simd reduction(+:s0, s1, s2, s3)
                for (int64_t k = start[p]; k < stop[p]; k++) {
                    const float rk = r[k];
                    float v = a[k], d;
                    d = x0[k] - rk; s0 += d * d; v += w0 * x0[k];
                    d = x1[k] - rk; s1 += d * d; v += w1 * x1[k];
                    d = x2[k] - rk; s2 += d * d; v += w2 * x2[k];
                    d = x3[k] - rk; s3 += d * d; v += w3 * x3[k];
                    a[k] = v;
                }
                total[0] += s0; total[1] += s1; total[2] += s2; total[3] += s3;
            }
            for (int q = 0; q < 4; q++) sq[(i + q) * nblock + j] = total[q];
        }
        for (; i < nmodel; i++) {  /* the rest one at a time; the norms or the sum alone */
            double total = 0.0;
            const float wi = (float)w[i];
            for (int64_t p = first[j]; p < first[j + 1]; p++) {
                const float *x = xs[i * ntensor + tensor[p]], *r = ref[tensor[p]];
                float *a = acc ? acc[tensor[p]] : 0;
                float part = 0.0f;
                if (acc && sq) {
                    #pragma omp simd reduction(+:part)
                    for (int64_t k = start[p]; k < stop[p]; k++) {
                        float d = x[k] - r[k];
                        part += d * d;
                        a[k] += wi * x[k];
                    }
                } else if (acc) {
                    #pragma omp simd
                    for (int64_t k = start[p]; k < stop[p]; k++) a[k] += wi * x[k];
                } else {
                    #pragma omp simd reduction(+:part)
                    for (int64_t k = start[p]; k < stop[p]; k++) {
                        float d = x[k] - r[k];
                        part += d * d;
                    }
                }
                total += part;
            }
            if (sq) sq[i * nblock + j] = total;
        }
        if (acc && minus_scale != 0.0)
            for (int64_t p = first[j]; p < first[j + 1]; p++) {
                float *a = acc[tensor[p]];
                const float *r = ref[tensor[p]];
                if (minus_scale == 1.0) {
                    for (int64_t k = start[p]; k < stop[p]; k++) a[k] -= r[k];
                } else {
                    const float neg = (float)-minus_scale;
                    for (int64_t k = start[p]; k < stop[p]; k++) a[k] += neg * r[k];
                }
            }
    }
}
"""

# tried in order: the first that builds is used (-march=native: this machine's vector width)
FLAGS = (("-O3", "-march=native", "-fopenmp-simd"), ("-O3", "-fopenmp-simd"), ("-O2",))


def set_mode(mode: str) -> None:
    """"auto": the compiled loop where it builds (the default); "torch": plain PyTorch."""
    global _mode
    if mode not in MODES:
        raise ValueError(f"server pass {mode!r}: choose one of {', '.join(MODES)}")
    _mode = mode


def compiler() -> str | None:
    """The C compiler: $CC where set, else the first of cc, gcc, clang on the PATH."""
    cc = os.environ.get("CC", "").strip()
    if cc:
        return shutil.which(cc)
    return next((path for path in map(shutil.which, ("cc", "gcc", "clang")) if path), None)


@functools.lru_cache(maxsize=1)
def _load():
    """The compiled `blocks_f32`, or None (no compiler, or it failed: said once)."""
    cc = compiler()
    if cc is None:
        log(INFO, "Server pass: PyTorch (no C compiler found: with gcc or clang the server "
                  "compiles a faster one; docs/performance.md#the-servers-pass)")
        return None
    with tempfile.TemporaryDirectory(prefix="server-pass-") as tmp:
        src, lib = os.path.join(tmp, "blocks.c"), os.path.join(tmp, "blocks.so")
        with open(src, "w") as f:
            f.write(SOURCE)
        errors = ""
        for flags in FLAGS:
            try:
                done = subprocess.run([cc, *flags, "-shared", "-fPIC", "-o", lib, src],
                                      capture_output=True, text=True, timeout=120, check=False)
            except (OSError, subprocess.SubprocessError) as err:
                errors = str(err)
                continue
            if done.returncode == 0:
                break
            errors = done.stderr.strip()[-400:]
        else:
            log(WARNING, "Server pass: PyTorch (%s could not build the compiled one: %s; "
                         "server-pass = 'torch' skips the attempt)", cc, errors)
            return None
        try:  # loaded: the file may go with its directory
            fn = ctypes.CDLL(lib).blocks_f32
        except OSError as err:  # e.g. a temporary directory mounted noexec
            log(WARNING, "Server pass: PyTorch (the compiled one did not load: %s; "
                         "server-pass = 'torch' skips the attempt)", err)
            return None
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fn.argtypes = [i64, i64, ptr, ptr, ptr, ptr, i64, i64, i64, ptr, ptr, ptr, ptr,
                   ctypes.c_double, ptr]
    fn.restype = None
    log(DEBUG, "Server pass: compiled by %s %s", cc, " ".join(flags))
    return fn


_pool_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None


def _threads() -> ThreadPoolExecutor:
    """A pool of torch.get_num_threads() threads (made again when that number changes)."""
    global _pool
    with _pool_lock:
        count = max(1, torch.get_num_threads())
        if _pool is None or _pool[0] != count:
            if _pool is not None:
                _pool[1].shutdown(wait=False)  # its threads end when idle
            _pool = (count, ThreadPoolExecutor(count, thread_name_prefix="server-pass"))
        return _pool[1]


def run(flats: Sequence[Sequence[torch.Tensor]], ref: Sequence[torch.Tensor],
        acc: Sequence[torch.Tensor] | None, weights: Sequence[float] | None, blocks: tuple,
        sizes: Sequence[int], minus_scale: float = 1.0,
        norms: bool = True) -> torch.Tensor | None | bool:
    """The pass over `blocks` (`server_math.blocks.plan` of `sizes`) of the models' flattened
    tensors `flats`: with `acc`, sum_i weights_i * flats_i - minus_scale * ref written into it;
    with `norms`, the (models x blocks) float64 sums of squares of flats_i - ref, returned
    (else None). False when the compiled loop is off, did not build, or does not take these
    tensors (not all float32, on the CPU and contiguous): the caller runs PyTorch."""
    if _mode != "auto":
        return False
    groups = [ref, *([] if acc is None else [acc]), *flats]
    if not all(t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous()
               for group in groups for t in group):
        return False
    fn = _load()
    if fn is None:
        return False
    if any(len(group) != len(sizes) or any(t.numel() != n for t, n in zip(group, sizes))
           for group in groups):
        raise ValueError("the server pass got tensors that do not fit its plan")
    first, tensor, start, stop = [0], [], [], []
    for block in blocks:
        for t, a, b in block:
            tensor.append(t)
            start.append(a)
            stop.append(b)
        first.append(len(tensor))
    longs = functools.partial(torch.tensor, dtype=torch.int64)
    index = [longs(v) for v in (first, tensor, start, stop)]
    xs = longs([t.data_ptr() for model in flats for t in model])
    refs = longs([t.data_ptr() for t in ref])
    accs = None if acc is None else longs([t.data_ptr() for t in acc])
    w = torch.tensor(list(weights) if weights is not None else [0.0] * len(flats),
                     dtype=torch.float64)
    sq = torch.zeros(len(flats), len(blocks), dtype=torch.float64) if norms else None
    args = (*(v.data_ptr() for v in index), len(flats), len(sizes), len(blocks), xs.data_ptr(),
            refs.data_ptr(), None if accs is None else accs.data_ptr(), w.data_ptr(),
            float(minus_scale), None if sq is None else sq.data_ptr())
    parts = min(len(blocks), 4 * max(1, torch.get_num_threads()))  # ranges of whole blocks
    cuts = [len(blocks) * q // parts for q in range(parts + 1)] if parts else [0, 0]
    if parts <= 1:
        fn(cuts[0], cuts[-1], *args)
    else:  # every tensor above stays referenced until the last range is done
        list(_threads().map(lambda ab: fn(ab[0], ab[1], *args), zip(cuts, cuts[1:])))
    return sq
