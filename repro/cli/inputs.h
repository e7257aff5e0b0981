// inputs.h: replaying tensors captured from a failing PyTorch run.
//
// A user saves the exact Q, K, V (and mask) that hung with np.save and passes the directory
// with --inputs; the harness takes the shapes and dtype from the files and runs the same
// function on the same bits.
#pragma once

#include <string>

#include "math_sdpa/problem.h"

namespace sdpa {

// Reads DIR/q.npy, k.npy, v.npy and, if present, mask.npy. Q is [B, Hq, L, E], K and V are
// [B, Hkv, S, E]; float32, float16, or bfloat16 stored as uint16, all three the same. The mask
// is bool (a boolean mask) or the inputs' float type (an additive mask), shaped [L, S] or
// [B|1, H|1, L, S]. Sets the shapes, dtype (unless dtype_given: then values are rounded to
// problem.dtype) and mask kind in `problem`. DIR/dout.npy, if present, is --backward's gradient
// of the output (Q's shape and dtype). Throws InputError (one line) on any mismatch.
HostInputs load_npy_inputs(const std::string& dir, SdpaProblem& problem, bool dtype_given);

// --save-inputs DIR: each of `layers` layers' inputs as the run makes them (layer_inputs), for
// scripts/torch_stages.py: DIR/layerN.q.npy [B, Hq, L, E], layerN.k.npy and layerN.v.npy
// [B, Hkv, S, E] (float32, the values rounded to the dtype), layerN.grad_out.npy with `backward`, and
// DIR/mask.npy ([B|1, H|1, L, S]; bool for a boolean mask, float32 for an additive one). DIR is
// made if needed; each file written atomically.
void save_layer_inputs(const std::string& dir, const SdpaProblem& problem, int layers, const HostInputs* given, bool backward);

}  // namespace sdpa
