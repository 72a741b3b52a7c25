//! The test matrix: every combination of the parameter lists, nested in
//! [`PARAMS`] order (first entry outermost), and inside each combination
//! the pp tests (`-p`), then tg (`-n`), then pp+tg (`-pg`), zeros skipped,
//! as llama.cpp's `get_cmd_params_instances`.

use crate::bench::args::Params;
use crate::bench::params::{self, Scope, Value, PARAMS};

/// One test to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// One value per parameter, aligned with [`PARAMS`].
    pub values: Vec<Value>,
    /// Prompt tokens decoded in batches (0: none).
    pub n_prompt: i64,
    /// Tokens generated one at a time (0: none).
    pub n_gen: i64,
}

impl Instance {
    /// The value of `field`.
    pub fn get(&self, field: &str) -> &Value {
        &self.values[params::index(field)]
    }

    /// `field` as a number.
    pub fn int(&self, field: &str) -> i64 {
        self.get(field).int()
    }

    /// `field` as text.
    pub fn str(&self, field: &str) -> &str {
        self.get(field).str()
    }

    /// `field` as a switch.
    pub fn bool(&self, field: &str) -> bool {
        self.get(field).bool()
    }

    /// The device this test offloads to (`SIM0`, `CUDA0`), if any.
    pub fn device(&self) -> Option<&str> {
        match self.str("devices") {
            "auto" | "none" => None,
            d => Some(d),
        }
    }

    /// Whether this test runs on a sim device (its device list starts with
    /// one): it gets the simulated clock's profile and fields.
    pub fn on_sim_device(&self) -> bool {
        self.device()
            .is_some_and(|d| d.to_ascii_uppercase().starts_with("SIM"))
    }

    /// Whether `other` can reuse this test's loaded model: the same values
    /// of every [`Scope::Model`] parameter (and, with a device, the same
    /// threads, which the device computes with).
    pub fn same_model(&self, other: &Instance) -> bool {
        let same = PARAMS
            .iter()
            .zip(self.values.iter().zip(&other.values))
            .all(|(spec, (a, b))| spec.scope != Scope::Model || a == b);
        same && (self.device().is_none() || self.int("n_threads") == other.int("n_threads"))
    }
}

/// Expand the lists into the tests, in llama.cpp's order.
pub fn instances(p: &Params) -> Vec<Instance> {
    let mut out = Vec::new();
    if p.lists.iter().any(Vec::is_empty) {
        return out;
    }
    // an odometer over the lists, the last parameter turning fastest
    let mut idx = vec![0usize; PARAMS.len()];
    loop {
        let values: Vec<Value> = idx
            .iter()
            .zip(&p.lists)
            .map(|(&i, l)| l[i].clone())
            .collect();
        let tests = p
            .n_prompt
            .iter()
            .filter(|&&n| n > 0)
            .map(|&n| (n, 0))
            .chain(p.n_gen.iter().filter(|&&n| n > 0).map(|&n| (0, n)))
            .chain(p.n_pg.iter().copied().filter(|&(a, b)| a > 0 || b > 0));
        for (n_prompt, n_gen) in tests {
            out.push(Instance {
                values: values.clone(),
                n_prompt,
                n_gen,
            });
        }
        let mut k = PARAMS.len();
        loop {
            if k == 0 {
                return out;
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < p.lists[k].len() {
                break;
            }
            idx[k] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::args::{parse_args, Command};

    fn matrix(a: &[&str]) -> Vec<Instance> {
        match parse_args(a.iter().map(|s| s.to_string())).unwrap() {
            Command::Run(p) => instances(&p),
            c => panic!("{c:?}"),
        }
    }

    fn names(v: &[Instance], fields: &[&str]) -> Vec<String> {
        v.iter()
            .map(|i| {
                let mut s: Vec<String> = fields.iter().map(|f| i.get(f).text()).collect();
                s.push(format!("{}/{}", i.n_prompt, i.n_gen));
                s.join(" ")
            })
            .collect()
    }

    #[test]
    fn order_is_llama_cpp_s() {
        // md-lists: threads outermost, then pp, then tg
        let m = matrix(&["-p", "16,32", "-n", "4,8", "-t", "1,2"]);
        assert_eq!(
            names(&m, &["n_threads"]),
            ["1 16/0", "1 32/0", "1 0/4", "1 0/8", "2 16/0", "2 32/0", "2 0/4", "2 0/8"]
        );
        // md-cpumoe: n_cpu_moe outside flash_attn
        let m = matrix(&["-p", "16", "-n", "4", "-ncmoe", "0,1", "-fa", "0,1"]);
        assert_eq!(
            names(&m, &["n_cpu_moe", "flash_attn"]),
            [
                "0 0 16/0", "0 0 0/4", "0 1 16/0", "0 1 0/4", "1 0 16/0", "1 0 0/4", "1 1 16/0",
                "1 1 0/4"
            ]
        );
        // md-batch: n_batch outside n_ubatch
        let m = matrix(&["-p", "32", "-n", "0", "-b", "16,32", "-ub", "8,16"]);
        assert_eq!(
            names(&m, &["n_batch", "n_ubatch"]),
            ["16 8 32/0", "16 16 32/0", "32 8 32/0", "32 16 32/0"]
        );
        // md-depth: depth outside the tests
        let m = matrix(&["-p", "16", "-n", "4", "-d", "0,16"]);
        assert_eq!(
            names(&m, &["n_depth"]),
            ["0 16/0", "0 0/4", "16 16/0", "16 0/4"]
        );
        // -pg after pp and tg; -p 0 -n 0 leave only it
        let m = matrix(&["-p", "0", "-n", "0", "-pg", "16,4"]);
        assert_eq!(names(&m, &[]), ["16/4"]);
        assert!(matrix(&["-p", "0", "-n", "0"]).is_empty());
    }

    #[test]
    fn model_reuse_follows_the_scope() {
        let m = matrix(&["-p", "16", "-n", "0", "-b", "16,32", "-ncmoe", "0,1"]);
        assert!(m[0].same_model(&m[1]), "only -b differs");
        assert!(!m[1].same_model(&m[2]), "-ncmoe differs");
    }
}
