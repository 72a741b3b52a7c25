//! The graph in which the scheduler property test found a peer-copy race,
//! shared by its fixed sim case (`sched_props`) and its emulated CUDA case
//! (`emulator_peer_source`).

use ggml_core::{Graph, TensorId};

/// Builds, over the input `x` and four weights of 4 F32 each (`w4` and
/// `w11` host weights, `w7` on the first device, `w13` on the second), the
/// nodes `v3 = (2x + w4) / 2` crossing to the second device as
/// `v8 = v3 + w13`, and `v7 = 2x + w4 + w7 + w11`, whose host weight `w11`
/// the first device's upload stream copies into compute memory while the
/// peer copy may still read `v3`. Returns the outputs `[v8, v7]`.
pub fn build(
    g: &mut Graph,
    x: TensorId,
    w4: TensorId,
    w7: TensorId,
    w11: TensorId,
    w13: TensorId,
) -> [TensorId; 2] {
    let v0 = g.add(x, x);
    let v2 = g.add(v0, w4);
    let v3 = g.scale(v2, 0.5);
    let v4 = g.add(v2, w7);
    let v7 = g.add(v4, w11);
    let v8 = g.add(v3, w13);
    g.set_output(v8);
    g.set_output(v7);
    g.build_forward_expand(v8);
    g.build_forward_expand(v7);
    [v8, v7]
}
