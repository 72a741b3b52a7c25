//! The safe table entries of the SIMD levels: each wraps a level's
//! `unsafe` block-slice kernel (compiled with the level's target features)
//! into the raw-row signature of [`crate::quants::traits::CpuTypeTraits`], checking
//! the lengths as the scalar references do.
//!
//! # Safety
//! The wrappers call their kernels without a feature check: they are sound
//! only on a CPU with the kernel's features. They are private to the level
//! table modules, and a level's table is handed out only by
//! `tables::cpu_table`, which refuses a level the CPU lacks; so a wrapper
//! runs only where its features are present.

/// `fn $name(n, x, y) -> f32`: the kernel `$k(&[$bx], &[$by])` on the
/// blocks of two rows of `n` elements (panics as the scalar dot when a row
/// is short).
macro_rules! vec_dot {
    ($name:ident, $bx:ty, $by:ty, $k:path) => {
        fn $name(n: usize, x: &[u8], y: &[u8]) -> f32 {
            let (x, y) = (
                $crate::quants::block::row::<$bx>(x, n),
                $crate::quants::block::row::<$by>(y, n),
            );
            // SAFETY: only reachable through this level's table, which
            // `cpu_table` hands out on CPUs with the kernel's features
            // (see `tables::wrap`); the block slices are bounds-checked.
            unsafe { $k(x, y) }
        }
    };
}
pub(super) use vec_dot;

/// `fn $name(n, x, y) -> f32`: the float dot `$k(n, x, y)` on the first
/// `n` elements' bytes of each row (`$esize` bytes an element; panics as
/// the scalar dot when a row is short).
macro_rules! float_dot {
    ($name:ident, $what:literal, $esize:expr, $k:path) => {
        fn $name(n: usize, x: &[u8], y: &[u8]) -> f32 {
            $crate::quants::blocks::float::check_len($what, n, x.len(), $esize, false);
            $crate::quants::blocks::float::check_len($what, n, y.len(), $esize, false);
            // SAFETY: as `vec_dot!`'s (see `tables::wrap`); the kernel reads
            // exactly the `n` elements of the checked slices.
            unsafe { $k(n, &x[..$esize * n], &y[..$esize * n]) }
        }
    };
}
pub(super) use float_dot;

/// `fn $name(n, x, ys, out)` (a [`crate::quants::VecDotCols`]): the kernel
/// `$k::<C>(&[$bx], [&[$by]; C], out)` for the `C = ys.len()` columns.
macro_rules! vec_dot_cols {
    ($name:ident, $bx:ty, $by:ty, $($k:ident)::+) => {
        fn $name(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
            $crate::quants::vec_dot_cols::check_cols(ys, out);
            let xb = $crate::quants::block::row::<$bx>(x, n);
            macro_rules! go {
                ($c:literal) => {{
                    let yb: [&[$by]; $c] =
                        std::array::from_fn(|c| $crate::quants::block::row::<$by>(ys[c], n));
                    // SAFETY: as `vec_dot!`'s (see `tables::wrap`).
                    unsafe { $($k)::+::<$c>(xb, yb, out) }
                }};
            }
            match ys.len() {
                0 => {}
                1 => go!(1),
                2 => go!(2),
                3 => go!(3),
                4 => go!(4),
                5 => go!(5),
                6 => go!(6),
                7 => go!(7),
                _ => go!(8),
            }
        }
    };
}
pub(super) use vec_dot_cols;

/// `fn $name(n, xs, ys, out)` (a [`crate::quants::VecDotTile`]): the
/// kernel `$k::<2, C>([&[$bx]; 2], [&[$by]; C], &mut [[f32; C]; 2])` over
/// tiles of 2 rows × up to `TILE_COLS` columns; a single row goes through
/// `$cols` (the level's `vec_dot_cols`).
macro_rules! vec_dot_tile {
    ($name:ident, $bx:ty, $by:ty, $($k:ident)::+, $cols:ident) => {
        fn $name(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
            use $crate::quants::block::row;
            $crate::quants::vec_dot_tile::check_tile(xs, ys, out);
            let nc = ys.len();
            if xs.len() != 2 {
                for (r, x) in xs.iter().enumerate() {
                    $cols(n, x, ys, &mut out[r * nc..(r + 1) * nc]);
                }
                return;
            }
            let xb = [row::<$bx>(xs[0], n), row::<$bx>(xs[1], n)];
            let mut c0 = 0;
            while c0 < nc {
                let w = (nc - c0).min($crate::quants::vec_dot_tile::TILE_COLS);
                macro_rules! go {
                    ($c:literal) => {{
                        let yb: [&[$by]; $c] = std::array::from_fn(|c| row::<$by>(ys[c0 + c], n));
                        let mut o = [[0f32; $c]; 2];
                        // SAFETY: as `vec_dot!`'s (see `tables::wrap`).
                        unsafe { $($k)::+::<2, $c>(xb, yb, &mut o) };
                        for (r, or) in o.iter().enumerate() {
                            out[r * nc + c0..][..$c].copy_from_slice(or);
                        }
                    }};
                }
                match w {
                    1 => go!(1),
                    2 => go!(2),
                    3 => go!(3),
                    _ => go!(4),
                }
                c0 += w;
            }
        }
    };
}
pub(super) use vec_dot_tile;

/// `fn $name(n, x, panel, out)` (a [`crate::quants::QGemm`] run): the
/// kernel `$k(&[$bx], panel, out)` on the blocks of a row of `n` elements
/// (the kernel checks the panel's size).
macro_rules! gemm_run {
    ($name:ident, $bx:ty, $k:path) => {
        fn $name(
            n: usize,
            x: &[u8],
            panel: &[u8],
            out: &mut [f32; $crate::quants::gemm::GEMM_COLS],
        ) {
            let x = $crate::quants::block::row::<$bx>(x, n);
            // SAFETY: as `vec_dot!`'s (see `tables::wrap`).
            unsafe { $k(x, panel, out) }
        }
    };
}
pub(super) use gemm_run;

/// The [`crate::quants::QGemm`] of the panel module `$panel` (its
/// `panel_bytes` and `pack`) with the run `$run`.
macro_rules! qgemm {
    ($panel:path, $run:path) => {{
        use $panel as p;
        $crate::quants::gemm::QGemm {
            panel_bytes: p::panel_bytes,
            pack: p::pack,
            run: $run,
        }
    }};
}
pub(super) use qgemm;

/// A table entry's `vec_dot` and `gemm` from kernels: `$dot` (as
/// [`vec_dot!`]'s `$k`, on blocks `$bx` and `$by`; `-` keeps `$base`'s)
/// and `$gemm` (as [`gemm_run!`]'s, with the panel module `$panel`), over
/// the entry `$base` of the level below.
macro_rules! entry {
    ($base:expr, $bx:ty, $by:ty, dot $dot:path, gemm $panel:path, $gemm:path) => {
        $crate::quants::traits::CpuTypeTraits {
            vec_dot: {
                $crate::quants::tables::wrap::vec_dot!(dot, $bx, $by, $dot);
                dot
            },
            ..$crate::quants::tables::wrap::entry!($base, $bx, gemm $panel, $gemm)
        }
    };
    ($base:expr, $bx:ty, gemm $panel:path, $gemm:path) => {
        $crate::quants::traits::CpuTypeTraits {
            gemm: Some(&{
                $crate::quants::tables::wrap::gemm_run!(run, $bx, $gemm);
                $crate::quants::tables::wrap::qgemm!($panel, run)
            }),
            ..$base
        }
    };
}
pub(super) use entry;
