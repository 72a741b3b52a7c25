//! Build script of ggml-cuda: compiles `src/kernels.cu` followed by the
//! kernel families in `src/kernels/*.cu` (the source NVRTC also gets,
//! unchanged) and `emu/test_kernels.cu` as C++ for the CPU emulator
//! (`ggml_cuda::emu_kernels`).
//!
//! Data flow: both sources are parsed for their `extern "C" __global__`
//! kernels (name, parameters, `__launch_bounds__`, `__shared__`
//! declarations). For each source a C++ wrapper goes to `OUT_DIR`: the
//! emulation prelude (`emu/prelude.h`), the source (with `extern __shared__`
//! arrays rewritten into pointers to the launch's dynamic shared memory), one
//! trampoline per kernel that unpacks CUDA-style `void** params` into the
//! typed call, and `static_assert`s that the static shared memory computed
//! here equals the compiler's `sizeof`s. With `emu/runtime.cpp` they become
//! the static library `ggml_cuda_emu`, and `OUT_DIR/emu_kernel_table.rs`
//! lists every kernel for the Rust side (sets `cfg(ggml_cuda_emu)`).
//!
//! It also embeds the shipped kernel images of `shipped/` (cubins and PTX
//! made by `scripts/ship-kernels`; `src/shipped.rs`).
//!
//! Without a C++ compiler the build still succeeds: the table records
//! "emulator unavailable: <reason>" and launches return that error. A
//! compiler that is present but rejects the sources fails the build (as
//! does a `__shared__` declaration whose size cannot be attributed).

use std::collections::HashMap;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

/// One `extern "C" __global__` kernel of a source.
struct KernelSig {
    name: String,
    /// (type, name) of each parameter, in order.
    params: Vec<(String, String)>,
    /// `__launch_bounds__(max_threads, ...)`, evaluated.
    max_threads: Option<u64>,
    /// Static `__shared__` declarations: (element type, `[dims]` text).
    shared: Vec<(String, String)>,
    /// Static shared memory in bytes (each variable at its alignment).
    static_shared: u64,
}

/// `#define`s and `typedef`s of a source, for evaluating sizes.
struct Consts {
    defines: HashMap<String, String>,
    typedefs: HashMap<String, String>,
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(ggml_cuda_emu)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/kernels.cu");
    println!("cargo::rerun-if-changed=src/kernels");
    println!("cargo::rerun-if-changed=emu");
    println!("cargo::rerun-if-env-changed=CXX");
    println!("cargo::rerun-if-env-changed=GGML_CUDA_EMU_UCONTEXT");
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let emu = manifest.join("emu");

    // The kernel source NVRTC gets is `src/kernels.cu` followed by the
    // kernel families in `src/kernels/*.cu` in name order (`KERNELS_SRC` in
    // kernels.rs concatenates the same files; a test checks the two agree).
    let mut main_parts = vec![manifest.join("src/kernels.cu")];
    let mut families: Vec<PathBuf> = fs::read_dir(manifest.join("src/kernels"))
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "cu"))
                .collect()
        })
        .unwrap_or_default();
    families.sort();
    main_parts.extend(families);
    let sources = [
        ("main", main_parts, false),
        ("test", vec![emu.join("test_kernels.cu")], true),
    ];
    let mut table = Vec::new();
    let mut wrappers = Vec::new();
    for (tag, parts, test_only) in &sources {
        let mut src = String::new();
        let mut copy_text = String::new();
        for path in parts {
            let part = fs::read_to_string(path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            copy_text.push_str(&rewrite_dynamic_shared(&part, path));
            src.push_str(&part);
        }
        let path = &parts[0];
        let kernels = parse_kernels(&src).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let wrapper = out.join(format!("emu_kernels_{tag}.cpp"));
        let copy = out.join(format!("emu_kernels_{tag}.cu.inc"));
        fs::write(&copy, copy_text).expect("writing the source copy");
        fs::write(&wrapper, wrapper_source(&emu, &copy, &kernels)).expect("writing a wrapper");
        wrappers.push(wrapper);
        for k in kernels {
            if table
                .iter()
                .any(|(t, _): &(KernelSig, bool)| t.name == k.name)
            {
                panic!("kernel {} is defined twice", k.name);
            }
            table.push((k, *test_only));
        }
    }

    let status = compile(&emu, &wrappers);
    if status.is_ok() {
        println!("cargo::rustc-cfg=ggml_cuda_emu");
    } else if let Err(reason) = &status {
        println!("cargo::warning=CUDA emulator unavailable: {reason}");
    }
    fs::write(out.join("emu_kernel_table.rs"), rust_table(&table, &status))
        .expect("writing the kernel table");
    shipped_table(&manifest.join("shipped"), &out);
}

/// `OUT_DIR/shipped_files.rs`, included by `src/shipped.rs`: the manifest
/// and every `*.xz` image of `shipped/` (made by `scripts/ship-kernels`),
/// embedded in the binary. A missing folder embeds nothing (the loader
/// then says so and falls back to NVRTC).
fn shipped_table(dir: &Path, out: &Path) {
    println!("cargo::rerun-if-changed={}", dir.display());
    let mut s = String::from("// generated by ggml-cuda/build.rs\n");
    let manifest = dir.join("manifest.txt");
    if manifest.is_file() {
        let _ = writeln!(
            s,
            "pub(super) const MANIFEST: &str = include_str!({:?});",
            manifest.display().to_string()
        );
    } else {
        s.push_str("pub(super) const MANIFEST: &str = \"\";\n");
    }
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "xz"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    s.push_str("pub(super) static FILES: &[(&str, &[u8])] = &[\n");
    for f in files {
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let _ = writeln!(
            s,
            "    ({name:?}, include_bytes!({:?})),",
            f.display().to_string()
        );
    }
    s.push_str("];\n");
    fs::write(out.join("shipped_files.rs"), s).expect("writing the shipped kernel table");
}

/// Compile the runtime and the wrappers; `Err(reason)` only when there is no
/// working C++ compiler.
fn compile(emu: &Path, wrappers: &[PathBuf]) -> Result<(), String> {
    let family = env::var("CARGO_CFG_TARGET_FAMILY").unwrap_or_default();
    if !family.split(',').any(|f| f == "unix") {
        return Err(format!(
            "the emulator runtime needs a Unix-like target (mmap, fibers); target family is \
             '{family}'"
        ));
    }
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .opt_level(2)
        .warnings(false)
        .include(emu)
        .flag("-Wall")
        .flag("-Wno-unknown-pragmas")
        .flag("-Wno-unused-function")
        .flag("-Wno-unused-variable")
        .flag("-fno-strict-aliasing")
        .flag("-ffp-contract=off")
        .file(emu.join("runtime.cpp"));
    if env::var_os("GGML_CUDA_EMU_UCONTEXT").is_some() {
        build.define("GGML_CUDA_EMU_UCONTEXT", None);
    }
    for w in wrappers {
        build.file(w);
    }
    let tool = build
        .try_get_compiler()
        .map_err(|e| format!("no C++ compiler found ({e})"))?;
    let probe = tool.to_command().arg("--version").output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            return Err(format!(
                "the C++ compiler {} does not run ({})",
                tool.path().display(),
                o.status
            ))
        }
        Err(e) => {
            return Err(format!(
                "no C++ compiler found ({}: {e})",
                tool.path().display()
            ))
        }
    }
    if let Err(e) = build.try_compile("ggml_cuda_emu") {
        panic!("the CUDA emulator does not compile: {e}");
    }
    Ok(())
}

/// Remove `//` and `/* */` comments (kept as spaces, newlines kept).
fn strip_comments(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            out.extend_from_slice(b"  ");
            i += 2;
            while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                out.push(if b[i] == b'\n' { b'\n' } else { b' ' });
                i += 1;
            }
            out.extend_from_slice(b"  ");
            i += 2;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The index just past the bracket matching the one at `open`.
fn matching(s: &str, open: usize, o: u8, c: u8) -> Result<usize, String> {
    let mut depth = 0;
    for (i, &ch) in s.as_bytes().iter().enumerate().skip(open) {
        if ch == o {
            depth += 1;
        } else if ch == c {
            depth -= 1;
            if depth == 0 {
                return Ok(i + 1);
            }
        }
    }
    Err(format!("unbalanced '{}' at byte {open}", o as char))
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Split `TYPE NAME` at the last identifier.
fn split_decl(d: &str) -> Result<(String, String), String> {
    let d = d.trim();
    let start = d
        .char_indices()
        .rev()
        .take_while(|&(_, c)| is_ident(c))
        .last()
        .map(|(i, _)| i)
        .ok_or_else(|| format!("no name in declaration '{d}'"))?;
    let ty = d[..start].trim();
    if ty.is_empty() {
        return Err(format!("no type in declaration '{d}'"));
    }
    Ok((ty.to_string(), d[start..].to_string()))
}

fn parse_consts(src: &str) -> Consts {
    let mut defines = HashMap::new();
    let mut typedefs = HashMap::new();
    for line in src.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("#define ") {
            let rest = rest.trim();
            let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            let body = &rest[name.len()..];
            if !body.starts_with('(') {
                defines.insert(name, body.trim().to_string());
            }
        } else if let Some(rest) = l.strip_prefix("typedef ") {
            if let Some(decl) = rest.strip_suffix(';') {
                if let Ok((ty, name)) = split_decl(decl) {
                    typedefs.insert(name, ty);
                }
            }
        }
    }
    Consts { defines, typedefs }
}

impl Consts {
    /// (size, alignment) of a scalar type name (after typedefs).
    fn size_of(&self, ty: &str) -> Result<(u64, u64), String> {
        let norm: Vec<&str> = ty
            .split_whitespace()
            .filter(|w| *w != "const" && *w != "volatile")
            .collect();
        let t = norm.join(" ");
        if t.ends_with('*') {
            return Ok((8, 8));
        }
        if let Some(inner) = self.typedefs.get(&t) {
            return self.size_of(inner);
        }
        let s = match t.as_str() {
            "char" | "signed char" | "unsigned char" | "bool" | "int8_t" | "uint8_t" => 1,
            "short" | "unsigned short" | "short int" | "int16_t" | "uint16_t" => 2,
            "int" | "unsigned" | "unsigned int" | "float" | "int32_t" | "uint32_t" => 4,
            // CUDA's built-in vector types, at their alignment
            "float2" | "int2" | "uint2" => return Ok((8, 8)),
            "float4" | "int4" | "uint4" => return Ok((16, 16)),
            "long" | "unsigned long" | "long long" | "unsigned long long" | "double" | "size_t"
            | "int64_t" | "uint64_t" => 8,
            _ => return Err(format!("unknown type '{t}' in a __shared__ declaration")),
        };
        Ok((s, s))
    }

    /// Evaluate an integer constant expression (+ - * / % << >>, parens,
    /// `#define`d names, `sizeof(type)`).
    fn eval(&self, e: &str) -> Result<u64, String> {
        let toks = tokenize(e)?;
        let mut p = Parser {
            toks: &toks,
            pos: 0,
            consts: self,
            depth: 0,
        };
        let v = p.expr()?;
        if p.pos != toks.len() {
            return Err(format!("cannot evaluate '{e}'"));
        }
        u64::try_from(v).map_err(|_| format!("'{e}' is negative"))
    }
}

fn tokenize(e: &str) -> Result<Vec<String>, String> {
    let mut toks = Vec::new();
    let cs: Vec<char> = e.chars().collect();
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        if c.is_whitespace() {
            i += 1;
        } else if is_ident(c) {
            let s: String = cs[i..].iter().take_while(|&&c| is_ident(c)).collect();
            i += s.len();
            toks.push(s);
        } else if (c == '<' || c == '>') && cs.get(i + 1) == Some(&c) {
            toks.push(format!("{c}{c}"));
            i += 2;
        } else if "+-*/%()".contains(c) {
            toks.push(c.to_string());
            i += 1;
        } else {
            return Err(format!("unexpected '{c}' in '{e}'"));
        }
    }
    Ok(toks)
}

struct Parser<'a> {
    toks: &'a [String],
    pos: usize,
    consts: &'a Consts,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&str> {
        self.toks.get(self.pos).map(|s| s.as_str())
    }

    fn expr(&mut self) -> Result<i128, String> {
        let mut v = self.term()?;
        while let Some(op) = self.peek() {
            let op = op.to_string();
            match op.as_str() {
                "+" | "-" | "<<" | ">>" => {
                    self.pos += 1;
                    let r = self.term()?;
                    v = match op.as_str() {
                        "+" => v + r,
                        "-" => v - r,
                        "<<" => v << r,
                        _ => v >> r,
                    };
                }
                _ => break,
            }
        }
        Ok(v)
    }

    fn term(&mut self) -> Result<i128, String> {
        let mut v = self.atom()?;
        while let Some(op) = self.peek() {
            let op = op.to_string();
            match op.as_str() {
                "*" | "/" | "%" => {
                    self.pos += 1;
                    let r = self.atom()?;
                    if op != "*" && r == 0 {
                        return Err("division by zero".into());
                    }
                    v = match op.as_str() {
                        "*" => v * r,
                        "/" => v / r,
                        _ => v % r,
                    };
                }
                _ => break,
            }
        }
        Ok(v)
    }

    fn atom(&mut self) -> Result<i128, String> {
        let t = self.peek().ok_or("expression ends early")?.to_string();
        self.pos += 1;
        match t.as_str() {
            "(" => {
                let v = self.expr()?;
                if self.peek() != Some(")") {
                    return Err("missing ')'".into());
                }
                self.pos += 1;
                Ok(v)
            }
            "-" => Ok(-self.atom()?),
            "+" => self.atom(),
            "sizeof" => {
                if self.peek() != Some("(") {
                    return Err("sizeof without '('".into());
                }
                let close = self.toks[self.pos..]
                    .iter()
                    .position(|s| s == ")")
                    .ok_or("sizeof without ')'")?;
                let ty = self.toks[self.pos + 1..self.pos + close].join(" ");
                self.pos += close + 1;
                Ok(self.consts.size_of(&ty)?.0 as i128)
            }
            _ if t.starts_with(|c: char| c.is_ascii_digit()) => {
                let digits = t.trim_end_matches(['u', 'U', 'l', 'L']);
                let v = if let Some(h) = digits.strip_prefix("0x").or(digits.strip_prefix("0X")) {
                    i128::from_str_radix(h, 16)
                } else {
                    digits.parse::<i128>()
                };
                v.map_err(|_| format!("bad number '{t}'"))
            }
            _ => {
                let body = self
                    .consts
                    .defines
                    .get(&t)
                    .ok_or_else(|| format!("unknown name '{t}'"))?;
                if self.depth > 32 {
                    return Err(format!("'{t}' expands too deeply"));
                }
                let toks = tokenize(body)?;
                let mut p = Parser {
                    toks: &toks,
                    pos: 0,
                    consts: self.consts,
                    depth: self.depth + 1,
                };
                let v = p.expr()?;
                if p.pos != toks.len() {
                    return Err(format!("cannot evaluate #define {t} {body}"));
                }
                Ok(v)
            }
        }
    }
}

/// Every `extern "C" __global__` kernel of `src`.
fn parse_kernels(src: &str) -> Result<Vec<KernelSig>, String> {
    let consts = parse_consts(src);
    let code = strip_comments(src);
    let marker = "extern \"C\" __global__";
    let funcs = device_functions(&code)?;
    let mut kernels = Vec::new();
    let mut bodies: Vec<(usize, usize)> = funcs.iter().map(|&(_, a, b)| (a, b)).collect();
    let mut at = 0;
    while let Some(off) = code[at..].find(marker) {
        let start = at + off + marker.len();
        let open = start + code[start..].find('(').ok_or("kernel without parameters")?;
        // `void NAME`, possibly with __launch_bounds__(...) in between
        let mut head = code[start..open].trim().to_string();
        let mut max_threads = None;
        let mut open = open;
        if head.ends_with("__launch_bounds__") {
            let close = matching(&code, open, b'(', b')')?;
            let first = code[open + 1..close - 1]
                .split(',')
                .next()
                .unwrap_or_default();
            max_threads = Some(consts.eval(first)?);
            open = close + code[close..].find('(').ok_or("kernel without parameters")?;
            let before = head.trim_end_matches("__launch_bounds__").trim();
            head = format!("{before} {}", code[close..open].trim());
        }
        let name = head
            .split_whitespace()
            .last()
            .ok_or("kernel without a name")?
            .to_string();
        if !head.starts_with("void") || !name.chars().all(is_ident) {
            return Err(format!("cannot parse the kernel signature '{head}'"));
        }
        let close = matching(&code, open, b'(', b')')?;
        let mut params = Vec::new();
        for p in code[open + 1..close - 1].split(',') {
            if p.trim().is_empty() {
                continue;
            }
            let (ty, pname) = split_decl(p)?;
            if ty.contains('&') || ty.contains('[') {
                return Err(format!("kernel {name}: parameter '{p}' is not by value"));
            }
            params.push((ty.split_whitespace().collect::<Vec<_>>().join(" "), pname));
        }
        let body_open = close + code[close..].find('{').ok_or("kernel without a body")?;
        let body_close = matching(&code, body_open, b'{', b'}')?;
        let body = &code[body_open..body_close];
        let shared = kernel_shared(&code, body, &funcs)?;
        let static_shared = shared_total(&name, &shared, &consts)?;
        bodies.push((body_open, body_close));
        kernels.push(KernelSig {
            name,
            params,
            max_threads,
            shared,
            static_shared,
        });
        at = body_close;
    }
    // __shared__ outside a function body would be missed by static_shared
    let mut search = 0;
    while let Some(off) = code[search..].find("__shared__") {
        let pos = search + off;
        if !bodies.iter().any(|&(a, b)| a < pos && pos < b) && !code[..pos].ends_with("define ") {
            return Err(format!(
                "__shared__ outside a function body (byte {pos}): the static shared memory of \
                 kernels is computed from the declarations in their bodies and in the \
                 __device__ functions they call"
            ));
        }
        search = pos + 10;
    }
    Ok(kernels)
}

/// The static `__shared__` declarations of a function body: (element type,
/// `[dims]` text) per variable.
fn shared_decls(body: &str) -> Result<Vec<(String, String)>, String> {
    let mut decls = Vec::new();
    let mut at = 0;
    while let Some(off) = body[at..].find("__shared__") {
        let pos = at + off;
        let end = pos + body[pos..].find(';').ok_or("__shared__ without ';'")?;
        at = end;
        if body[..pos].trim_end().ends_with("extern") {
            continue; // dynamic: sized by the launch
        }
        let decl = body[pos + "__shared__".len()..end].trim();
        let mut ty = String::new();
        for (i, d) in split_top_commas(decl).iter().enumerate() {
            let (head, dims) = match d.find('[') {
                Some(b) => (&d[..b], &d[b..]),
                None => (&d[..], ""),
            };
            let (t, _name) = if i == 0 {
                split_decl(head)?
            } else {
                (ty.clone(), head.trim().to_string())
            };
            ty = t;
            decls.push((ty.clone(), dims.trim().to_string()));
        }
    }
    Ok(decls)
}

/// Bytes of the `__shared__` variables `decls`, each at its alignment.
fn shared_total(kernel: &str, decls: &[(String, String)], consts: &Consts) -> Result<u64, String> {
    let mut total = 0u64;
    for (ty, dims) in decls {
        let (size, align) = consts
            .size_of(ty)
            .map_err(|e| format!("kernel {kernel}: {e}"))?;
        let mut n = 1u64;
        let mut rest = dims.trim();
        while rest.starts_with('[') {
            let close = matching(rest, 0, b'[', b']')?;
            n *= consts
                .eval(&rest[1..close - 1])
                .map_err(|e| format!("kernel {kernel}: {e}"))?;
            rest = rest[close..].trim();
        }
        total = total.div_ceil(align) * align + n * size;
    }
    Ok(total)
}

/// `__device__` function definitions: (name, body start, body end).
fn device_functions(code: &str) -> Result<Vec<(String, usize, usize)>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(off) = code[at..].find("__device__") {
        let pos = at + off;
        at = pos + "__device__".len();
        let Some(open_rel) = code[pos..].find('(') else {
            break;
        };
        let open = pos + open_rel;
        if code[pos..open].contains([';', '{', '=']) {
            continue; // a variable, not a function
        }
        let name: String = code[pos..open]
            .trim_end()
            .chars()
            .rev()
            .take_while(|&c| is_ident(c))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let close = matching(code, open, b'(', b')')?;
        let rest = code[close..].trim_start();
        if !rest.starts_with('{') {
            continue; // a declaration only
        }
        let body_open = close + (code[close..].len() - rest.len());
        let body_close = matching(code, body_open, b'{', b'}')?;
        out.push((name, body_open, body_close));
        at = body_close;
    }
    Ok(out)
}

/// The identifiers in `text`.
fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !is_ident(c))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
}

/// The static `__shared__` declarations of a kernel: its own and those of
/// every `__device__` function it reaches (by name, transitively; a
/// function-local `__shared__` variable is one allocation per kernel).
fn kernel_shared(
    code: &str,
    body: &str,
    funcs: &[(String, usize, usize)],
) -> Result<Vec<(String, String)>, String> {
    let mut decls = shared_decls(body)?;
    let mut seen = vec![false; funcs.len()];
    let mut work = vec![body.to_string()];
    while let Some(text) = work.pop() {
        let names: Vec<&str> = identifiers(&text).collect();
        for (i, (name, a, b)) in funcs.iter().enumerate() {
            if !seen[i] && names.contains(&name.as_str()) {
                seen[i] = true;
                decls.extend(shared_decls(&code[*a..*b])?);
                work.push(code[*a..*b].to_string());
            }
        }
    }
    Ok(decls)
}

fn split_top_commas(s: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut depth = 0;
    for c in s.chars() {
        match c {
            '[' | '(' => depth += 1,
            ']' | ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(String::new());
                continue;
            }
            _ => {}
        }
        if let Some(last) = parts.last_mut() {
            last.push(c);
        }
    }
    parts
}

/// The source with each `extern __shared__ T name[];` replaced by a
/// pointer to the launch's dynamic shared memory (same line count).
fn rewrite_dynamic_shared(src: &str, path: &Path) -> String {
    let mut out = format!("#line 1 \"{}\"\n", path.display());
    for line in src.lines() {
        let t = line.trim_start();
        match t
            .strip_prefix("extern __shared__ ")
            .and_then(|r| r.trim_end().strip_suffix("[];"))
        {
            Some(decl) => {
                let indent = &line[..line.len() - t.len()];
                let decl = decl.replace("__align__", "").trim().to_string();
                match split_decl(&decl) {
                    Ok((ty, name)) => {
                        let _ = writeln!(
                            out,
                            "{indent}{ty}* const {name} = ({ty}*)emu_dynamic_shared();"
                        );
                    }
                    Err(_) => {
                        let _ = writeln!(out, "{line}");
                    }
                }
            }
            None => {
                let _ = writeln!(out, "{line}");
            }
        }
    }
    out
}

/// The C++ translation unit for one source.
fn wrapper_source(emu: &Path, copy: &Path, kernels: &[KernelSig]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "// generated by ggml-cuda/build.rs");
    let _ = writeln!(s, "#include \"{}\"", emu.join("prelude.h").display());
    let _ = writeln!(s, "#include \"{}\"", copy.display());
    let _ = writeln!(
        s,
        "constexpr unsigned long emu_al(unsigned long off, unsigned long a) {{ return (off + a - 1) / a * a; }}"
    );
    for k in kernels {
        for (i, (ty, _)) in k.params.iter().enumerate() {
            let _ = writeln!(s, "typedef {ty} emu_{}_p{i};", k.name);
        }
        let args: Vec<String> = (0..k.params.len())
            .map(|i| format!("*(emu_{}_p{i}*)p[{i}]", k.name))
            .collect();
        let _ = writeln!(
            s,
            "extern \"C\" void emu_tramp_{0}(void* const* p) {{ (void)p; {0}({1}); }}",
            k.name,
            args.join(", ")
        );
        let mut expr = "0ul".to_string();
        for (ty, dims) in &k.shared {
            expr = format!("emu_al({expr}, alignof({ty})) + sizeof({ty}{dims})");
        }
        let _ = writeln!(
            s,
            "static_assert({expr} == {}ul, \"build.rs computed {} bytes of static shared memory for {}\");",
            k.static_shared, k.static_shared, k.name
        );
    }
    s
}

/// `OUT_DIR/emu_kernel_table.rs`, included by `src/emu_kernels/table.rs`.
fn rust_table(table: &[(KernelSig, bool)], status: &Result<(), String>) -> String {
    let mut s = String::from("// generated by ggml-cuda/build.rs\n");
    match status {
        Ok(()) => s.push_str("pub(super) const UNAVAILABLE: Option<&str> = None;\n"),
        Err(r) => {
            let _ = writeln!(
                s,
                "pub(super) const UNAVAILABLE: Option<&str> = Some({:?});",
                format!("emulator unavailable: {r}")
            );
        }
    }
    if status.is_ok() {
        s.push_str("unsafe extern \"C\" {\n");
        for (k, _) in table {
            let _ = writeln!(
                s,
                "    fn emu_tramp_{}(params: *const *mut core::ffi::c_void);",
                k.name
            );
        }
        s.push_str("}\n");
    }
    s.push_str("pub(super) static KERNELS: &[KernelInfo] = &[\n");
    for (k, test_only) in table {
        let params: Vec<String> = k
            .params
            .iter()
            .map(|(t, n)| format!("{:?}", format!("{t} {n}")))
            .collect();
        let tramp = if status.is_ok() {
            format!("Some(emu_tramp_{})", k.name)
        } else {
            "None".into()
        };
        let _ = writeln!(
            s,
            "    KernelInfo {{ name: {:?}, params: &[{}], static_shared: {}, max_threads: {:?}, test_only: {}, tramp: {} }},",
            k.name,
            params.join(", "),
            k.static_shared,
            k.max_threads.map(|m| m as u32),
            test_only,
            tramp
        );
    }
    s.push_str("];\n");
    s
}
