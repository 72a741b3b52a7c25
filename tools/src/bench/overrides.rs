//! llama-bench's `-ot` syntax: `,` separates tests and `;` separates the
//! rules of one test (`-ot 'exps=CPU;norm=CPU,exps=CPU'` is two tests, the
//! first with two rules); an empty test is `none` (no rule). Each rule is
//! `PATTERN=BACKEND`, the pattern a regex searched in tensor names.

use llama::placement::Placement;

/// Parse one `-ot` argument into its tests, each written as llama.cpp
/// writes `tensor_buft_overrides`: rules joined by `;` with the backend in
/// upper case, or `none`.
pub fn parse_groups(arg: &str) -> Result<Vec<String>, String> {
    arg.split(',').map(parse_group).collect()
}

fn parse_group(group: &str) -> Result<String, String> {
    let mut rules = Vec::new();
    for rule in group.split(';').filter(|r| !r.is_empty()) {
        let (pat, be) = rule
            .rsplit_once('=')
            .ok_or_else(|| format!("rule '{rule}' is not of the form PATTERN=BACKEND"))?;
        if pat.is_empty() {
            return Err(format!("rule '{rule}' has no pattern"));
        }
        if be.is_empty() {
            return Err(format!("rule '{rule}' names no backend"));
        }
        // the regex must compile (the backend is checked once the test's
        // device is known)
        Placement::parse_overrides(rule).map_err(|e| e.to_string())?;
        rules.push(format!("{pat}={}", be.to_ascii_uppercase()));
    }
    Ok(if rules.is_empty() {
        "none".into()
    } else {
        rules.join(";")
    })
}

/// The rules of one test as `PATTERN=BACKEND` strings (none for `none`).
pub fn rules(group: &str) -> Vec<String> {
    if group == "none" {
        return Vec::new();
    }
    group.split(';').map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semicolons_split_rules_commas_split_tests() {
        assert_eq!(
            parse_groups("exps=CPU;norm=cpu").unwrap(),
            ["exps=CPU;norm=CPU"]
        );
        assert_eq!(
            parse_groups("exps=CPU;norm=CPU,exps=sim0,").unwrap(),
            ["exps=CPU;norm=CPU", "exps=SIM0", "none"]
        );
        assert_eq!(rules("exps=CPU;norm=CPU"), ["exps=CPU", "norm=CPU"]);
        assert!(rules("none").is_empty());
        assert!(parse_groups("exps")
            .unwrap_err()
            .contains("PATTERN=BACKEND"));
        assert!(parse_groups("(x=CPU")
            .unwrap_err()
            .contains("does not compile"));
        assert!(parse_groups("x=").unwrap_err().contains("no backend"));
    }
}
