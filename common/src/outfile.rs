//! Output files written to a temporary name in the same folder and renamed
//! when complete: a failed or interrupted run never leaves a partial or
//! empty file under the final name.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

/// A file being written; [`AtomicFile::commit`] renames it into place, and
/// dropping it uncommitted removes the temporary file.
pub struct AtomicFile {
    path: PathBuf,
    tmp: PathBuf,
    out: Option<std::io::BufWriter<std::fs::File>>,
}

/// The temporary name beside `path`: `.NAME.tmp-PID`.
pub fn temp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

impl AtomicFile {
    /// Create the temporary file (fails now when the folder is not writable).
    pub fn create(path: &Path) -> Result<AtomicFile> {
        if path.is_dir() {
            anyhow::bail!("cannot create '{}': it is a directory", path.display());
        }
        let tmp = temp_name(path);
        let f = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot create '{}'", path.display()))?;
        Ok(AtomicFile {
            path: path.to_path_buf(),
            tmp,
            out: Some(std::io::BufWriter::new(f)),
        })
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append bytes.
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        if let Some(w) = &mut self.out {
            w.write_all(bytes)
                .with_context(|| format!("cannot write '{}'", self.path.display()))?;
        }
        Ok(())
    }

    /// Flush, sync and rename into place.
    pub fn commit(mut self) -> Result<()> {
        if let Some(w) = self.out.take() {
            let f = w.into_inner().map_err(|e| {
                anyhow::anyhow!("cannot write '{}': {}", self.path.display(), e.error())
            })?;
            f.sync_all()
                .with_context(|| format!("cannot write '{}'", self.path.display()))?;
        }
        std::fs::rename(&self.tmp, &self.path).with_context(|| {
            format!(
                "cannot move '{}' to '{}'",
                self.tmp.display(),
                self.path.display()
            )
        })
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.bin");
        let mut f = AtomicFile::create(&p).unwrap();
        f.write_all(b"abc").unwrap();
        assert!(!p.exists());
        f.commit().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"abc");
        let q = dir.path().join("b.bin");
        let mut g = AtomicFile::create(&q).unwrap();
        g.write_all(b"x").unwrap();
        drop(g);
        assert!(!q.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
