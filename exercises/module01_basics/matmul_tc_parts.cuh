#pragma once
/// @file matmul_tc_parts.cuh
/// @brief What the two files of YOUR tensor-core matmul share: matmul_tc.cu (steps 1-2 and
/// the dispatcher matmul_tc()) calls the launchers of the Hopper steps, which live in
/// matmul_tc_hopper.cu (steps 3-6: wgmma, tma_warp_specialized, persistent,
/// cluster_multicast). The same split as solutions/module01_basics/.

#include "module01/matmul_tc.hpp"

namespace course::exercise::tc_parts {

/// The Hopper steps (matmul_tc_hopper.cu). Each throws course::NotImplemented until you
/// have written it, then course::Unsupported unless the GPU is a Hopper (compute
/// capability 9.0) and the binary carries sm_90a code.
void launch_wgmma(const m01::TcMatmulArgs& a);
void launch_tma_warp_specialized(const m01::TcMatmulArgs& a);
void launch_persistent(const m01::TcMatmulArgs& a);
void launch_cluster_multicast(const m01::TcMatmulArgs& a);

}  // namespace course::exercise::tc_parts
