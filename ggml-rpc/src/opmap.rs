//! Our ops as ggml numbers them: each [`Op`] to its `GGML_OP_*` ordinal and
//! raw `op_params` exactly as ggml's constructors (`ggml.c`) lay them out,
//! and back (the fake worker reads what the client sent).
//!
//! | op | ggml op | `op_params` |
//! | --- | --- | --- |
//! | `Scale { s, b }` | `SCALE` | `f32 s, f32 b` |
//! | `RmsNorm`/`Norm { eps }` | `RMS_NORM`/`NORM` | `f32 eps` |
//! | `Unary(u)` | `UNARY` | `i32 ggml_unary_op` |
//! | `Glu { op, swapped }` | `GLU` | `i32 ggml_glu_op, i32 swapped` (+ `f32 alpha, f32 limit` at 2, 3 for SWIGLU_OAI) |
//! | `RopeExt(p)` | `ROPE` | `0, n_dims, mode, 0, n_ctx_orig, f32 freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow, sections[4] = 0, n_offs = 0` |
//! | `SoftMaxExt` | `SOFT_MAX` | `f32 scale, f32 max_bias` |
//! | `FlashAttnExt` | `FLASH_ATTN_EXT` | `f32 scale, max_bias, softcap, i32 prec = GGML_PREC_F32` |
//! | `Argsort(o)` | `ARGSORT` | `i32 order` |
//! | `TopK { k }` | `TOP_K` | none (k is `ne[0]`) |
//! | `Concat { dim }` | `CONCAT` | `i32 dim` |
//! | `View` | `VIEW` | `u64 offset` |
//!
//! The other ops take no parameters. Sources are in ggml's order, which is
//! ours except for `SET_ROWS`: ggml keeps `(rows, indices, destination)`,
//! we `(destination, rows, indices)` ([`to_ggml_sources`]). `TOP_K` is the one op whose ggml
//! meaning is looser than ours: ggml gives the k indices in no particular
//! order (its CPU kernel swaps the first two), ours largest first; every
//! consumer here (`get_rows` of the weights, `mul_mat_id`) treats them as a
//! set, so only the order of a sum of the experts' outputs can differ.

use ggml_core::op::{GluOp, Op, RopeMode, RopeParams, SortOrder, UnaryOp};

use crate::ordinals::{glu, op, unary, ROPE_TYPE_NEOX};
use crate::proto::N_OP_PARAMS;

/// `GGML_PREC_F32`, the flash-attention precision llama.cpp asks for.
pub const PREC_F32: i32 = 10;

fn f(v: f32) -> i32 {
    v.to_bits() as i32
}

fn unf(v: i32) -> f32 {
    f32::from_bits(v as u32)
}

fn unary_ordinal(u: UnaryOp) -> i32 {
    match u {
        UnaryOp::Silu => unary::SILU,
        UnaryOp::Gelu => unary::GELU,
        UnaryOp::Sigmoid => unary::SIGMOID,
        UnaryOp::Neg => unary::NEG,
        UnaryOp::Relu => unary::RELU,
        UnaryOp::Exp => unary::EXP,
    }
}

/// The ggml op ordinal and `op_params` of `o`; `view_offs` is the node's
/// byte offset into its view source (a `VIEW`'s parameter).
pub fn encode(o: &Op, view_offs: usize) -> (u32, [i32; N_OP_PARAMS]) {
    let mut p = [0i32; N_OP_PARAMS];
    let ord = match *o {
        Op::None => op::NONE,
        Op::Dup => op::DUP,
        Op::Cpy => op::CPY,
        Op::Cont => op::CONT,
        Op::Reshape => op::RESHAPE,
        Op::View => {
            let v = view_offs as u64;
            p[0] = v as u32 as i32;
            p[1] = (v >> 32) as u32 as i32;
            op::VIEW
        }
        Op::Permute => op::PERMUTE,
        Op::Transpose => op::TRANSPOSE,
        Op::GetRows => op::GET_ROWS,
        Op::Add => op::ADD,
        Op::Sub => op::SUB,
        Op::Mul => op::MUL,
        Op::Div => op::DIV,
        Op::Scale { s, b } => {
            p[0] = f(s.get());
            p[1] = f(b.get());
            op::SCALE
        }
        Op::Sqr => op::SQR,
        Op::Sqrt => op::SQRT,
        Op::SumRows => op::SUM_ROWS,
        Op::Mean => op::MEAN,
        Op::Argmax => op::ARGMAX,
        Op::RmsNorm { eps } => {
            p[0] = f(eps.get());
            op::RMS_NORM
        }
        Op::Norm { eps } => {
            p[0] = f(eps.get());
            op::NORM
        }
        Op::MulMat => op::MUL_MAT,
        Op::MulMatId => op::MUL_MAT_ID,
        Op::AddId => op::ADD_ID,
        Op::RopeExt(r) => {
            p[1] = r.n_dims;
            p[2] = match r.mode {
                RopeMode::Normal => 0,
                RopeMode::Neox => ROPE_TYPE_NEOX,
            };
            p[4] = r.n_ctx_orig;
            p[5] = f(r.freq_base.get());
            p[6] = f(r.freq_scale.get());
            p[7] = f(r.ext_factor.get());
            p[8] = f(r.attn_factor.get());
            p[9] = f(r.beta_fast.get());
            p[10] = f(r.beta_slow.get());
            op::ROPE
        }
        Op::SoftMaxExt { scale, max_bias } => {
            p[0] = f(scale.get());
            p[1] = f(max_bias.get());
            op::SOFT_MAX
        }
        Op::Unary(u) => {
            p[0] = unary_ordinal(u);
            op::UNARY
        }
        Op::Glu { op: g, swapped } => {
            p[0] = match g {
                GluOp::Swiglu => glu::SWIGLU,
                GluOp::Geglu => glu::GEGLU,
                GluOp::SwigluOai { alpha, limit } => {
                    p[2] = f(alpha.get());
                    p[3] = f(limit.get());
                    glu::SWIGLU_OAI
                }
            };
            p[1] = i32::from(swapped);
            op::GLU
        }
        Op::Argsort(order) => {
            p[0] = match order {
                SortOrder::Asc => 0,
                SortOrder::Desc => 1,
            };
            op::ARGSORT
        }
        Op::TopK { .. } => op::TOP_K,
        Op::Concat { dim } => {
            p[0] = dim;
            op::CONCAT
        }
        Op::SetRows => op::SET_ROWS,
        Op::FlashAttnExt {
            scale,
            max_bias,
            softcap,
        } => {
            p[0] = f(scale.get());
            p[1] = f(max_bias.get());
            p[2] = f(softcap.get());
            p[3] = PREC_F32;
            op::FLASH_ATTN_EXT
        }
    };
    (ord, p)
}

/// The sources of a node of op `o` in ggml's order (`SET_ROWS` moves the
/// destination from first to last).
pub fn to_ggml_sources<T: Copy>(o: &Op, src: &[T]) -> Vec<T> {
    match (o, src) {
        (Op::SetRows, [a, b, c]) => vec![*b, *c, *a],
        _ => src.to_vec(),
    }
}

/// The inverse of [`to_ggml_sources`]: ggml's order to ours.
pub fn from_ggml_sources<T: Copy>(o: &Op, src: &[T]) -> Vec<T> {
    match (o, src) {
        (Op::SetRows, [b, c, a]) => vec![*a, *b, *c],
        _ => src.to_vec(),
    }
}

/// Our op for a ggml ordinal and its `op_params`; `ne0` is the node's
/// `ne[0]` (`TOP_K`'s k). An op this engine never sends is an error naming
/// it.
pub fn decode(ord: u32, p: &[i32; N_OP_PARAMS], ne0: i64) -> Result<Op, String> {
    let name = || crate::ordinals::op_name(ord).unwrap_or("(out of range)");
    Ok(match ord {
        op::NONE => Op::None,
        op::DUP => Op::Dup,
        op::CPY => Op::Cpy,
        op::CONT => Op::Cont,
        op::RESHAPE => Op::Reshape,
        op::VIEW => Op::View,
        op::PERMUTE => Op::Permute,
        op::TRANSPOSE => Op::Transpose,
        op::GET_ROWS => Op::GetRows,
        op::ADD => Op::Add,
        op::SUB => Op::Sub,
        op::MUL => Op::Mul,
        op::DIV => Op::Div,
        op::SCALE => Op::Scale {
            s: unf(p[0]).into(),
            b: unf(p[1]).into(),
        },
        op::SQR => Op::Sqr,
        op::SQRT => Op::Sqrt,
        op::SUM_ROWS => Op::SumRows,
        op::MEAN => Op::Mean,
        op::ARGMAX => Op::Argmax,
        op::RMS_NORM => Op::RmsNorm {
            eps: unf(p[0]).into(),
        },
        op::NORM => Op::Norm {
            eps: unf(p[0]).into(),
        },
        op::MUL_MAT => Op::MulMat,
        op::MUL_MAT_ID => Op::MulMatId,
        op::ADD_ID => Op::AddId,
        op::ROPE => Op::RopeExt(RopeParams {
            n_dims: p[1],
            mode: match p[2] {
                0 => RopeMode::Normal,
                ROPE_TYPE_NEOX => RopeMode::Neox,
                m => return Err(format!("ROPE mode {m} is not one this engine sends")),
            },
            n_ctx_orig: p[4],
            freq_base: unf(p[5]).into(),
            freq_scale: unf(p[6]).into(),
            ext_factor: unf(p[7]).into(),
            attn_factor: unf(p[8]).into(),
            beta_fast: unf(p[9]).into(),
            beta_slow: unf(p[10]).into(),
        }),
        op::SOFT_MAX => Op::SoftMaxExt {
            scale: unf(p[0]).into(),
            max_bias: unf(p[1]).into(),
        },
        op::UNARY => Op::Unary(match p[0] {
            unary::SILU => UnaryOp::Silu,
            unary::GELU => UnaryOp::Gelu,
            unary::SIGMOID => UnaryOp::Sigmoid,
            unary::NEG => UnaryOp::Neg,
            unary::RELU => UnaryOp::Relu,
            unary::EXP => UnaryOp::Exp,
            u => return Err(format!("unary op {u} is not one this engine sends")),
        }),
        op::GLU => Op::Glu {
            op: match p[0] {
                glu::SWIGLU => GluOp::Swiglu,
                glu::GEGLU => GluOp::Geglu,
                glu::SWIGLU_OAI => GluOp::SwigluOai {
                    alpha: unf(p[2]).into(),
                    limit: unf(p[3]).into(),
                },
                g => return Err(format!("GLU op {g} is not one this engine sends")),
            },
            swapped: p[1] != 0,
        },
        op::ARGSORT => Op::Argsort(match p[0] {
            0 => SortOrder::Asc,
            1 => SortOrder::Desc,
            o => return Err(format!("ARGSORT order {o}")),
        }),
        op::TOP_K => Op::TopK {
            k: i32::try_from(ne0).map_err(|_| format!("TOP_K k = {ne0}"))?,
        },
        op::CONCAT => Op::Concat { dim: p[0] },
        op::SET_ROWS => Op::SetRows,
        op::FLASH_ATTN_EXT => Op::FlashAttnExt {
            scale: unf(p[0]).into(),
            max_bias: unf(p[1]).into(),
            softcap: unf(p[2]).into(),
        },
        _ => {
            return Err(format!(
                "op {ord} (GGML_OP_{}) is not one this engine sends",
                name()
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ggml_core::op::OrderedF32;

    fn all_ops() -> Vec<Op> {
        let r = RopeParams {
            n_dims: 64,
            mode: RopeMode::Neox,
            n_ctx_orig: 4096,
            freq_base: 10000.0.into(),
            freq_scale: 0.25.into(),
            ext_factor: 1.0.into(),
            attn_factor: 0.9.into(),
            beta_fast: 32.0.into(),
            beta_slow: 1.0.into(),
        };
        let x: OrderedF32 = 0.125.into();
        vec![
            Op::None,
            Op::Dup,
            Op::Cpy,
            Op::Cont,
            Op::Reshape,
            Op::View,
            Op::Permute,
            Op::Transpose,
            Op::GetRows,
            Op::Add,
            Op::Sub,
            Op::Mul,
            Op::Div,
            Op::Scale {
                s: x,
                b: (-2.0).into(),
            },
            Op::Sqr,
            Op::Sqrt,
            Op::SumRows,
            Op::Mean,
            Op::Argmax,
            Op::RmsNorm { eps: 1e-6.into() },
            Op::Norm { eps: 1e-5.into() },
            Op::MulMat,
            Op::MulMatId,
            Op::AddId,
            Op::RopeExt(r),
            Op::RopeExt(RopeParams {
                mode: RopeMode::Normal,
                ..r
            }),
            Op::SoftMaxExt {
                scale: x,
                max_bias: 0.0.into(),
            },
            Op::Unary(UnaryOp::Silu),
            Op::Unary(UnaryOp::Gelu),
            Op::Unary(UnaryOp::Sigmoid),
            Op::Unary(UnaryOp::Neg),
            Op::Unary(UnaryOp::Relu),
            Op::Unary(UnaryOp::Exp),
            Op::Glu {
                op: GluOp::Swiglu,
                swapped: false,
            },
            Op::Glu {
                op: GluOp::Geglu,
                swapped: true,
            },
            Op::Glu {
                op: GluOp::SwigluOai {
                    alpha: 1.702.into(),
                    limit: 7.0.into(),
                },
                swapped: false,
            },
            Op::Argsort(SortOrder::Asc),
            Op::Argsort(SortOrder::Desc),
            Op::TopK { k: 4 },
            Op::Concat { dim: 2 },
            Op::SetRows,
            Op::FlashAttnExt {
                scale: x,
                max_bias: 0.0.into(),
                softcap: 30.0.into(),
            },
        ]
    }

    #[test]
    fn every_op_round_trips() {
        for o in all_ops() {
            let (ord, p) = encode(&o, 0);
            let ne0 = if let Op::TopK { k } = o { k as i64 } else { 1 };
            assert_eq!(decode(ord, &p, ne0), Ok(o), "{o:?}");
        }
    }

    #[test]
    fn set_rows_sources_move_as_ggml_orders_them() {
        assert_eq!(to_ggml_sources(&Op::SetRows, &[1, 2, 3]), [2, 3, 1]);
        assert_eq!(from_ggml_sources(&Op::SetRows, &[2, 3, 1]), [1, 2, 3]);
        assert_eq!(to_ggml_sources(&Op::MulMatId, &[1, 2, 3]), [1, 2, 3]);
    }

    #[test]
    fn params_sit_where_ggml_puts_them() {
        let (ord, p) = encode(&Op::View, 0x1_0000_0040);
        assert_eq!((ord, p[0], p[1]), (op::VIEW, 0x40, 1));
        let (ord, p) = encode(
            &Op::Glu {
                op: GluOp::SwigluOai {
                    alpha: 1.702.into(),
                    limit: 7.0.into(),
                },
                swapped: false,
            },
            0,
        );
        assert_eq!((ord, p[0], p[1]), (op::GLU, 3, 0));
        assert_eq!((unf(p[2]), unf(p[3])), (1.702, 7.0));
        let (_, p) = encode(&all_ops()[24], 0);
        assert_eq!(&p[..5], &[0, 64, 2, 0, 4096]);
        assert_eq!(unf(p[5]), 10000.0);
        assert_eq!(&p[11..], &[0; 5]);
        let e = decode(op::UNARY, &[99; 16], 1).unwrap_err();
        assert!(e.contains("unary op 99"), "{e}");
        let e = decode(op::CONCAT + 1, &[0; 16], 1).unwrap_err();
        assert!(e.contains("GGML_OP_SILU_BACK"), "{e}");
    }
}
