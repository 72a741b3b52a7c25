//! The files a run writes as it goes (`--logits-out`, `--tokens-out`):
//! each optional, each written under a temporary name and renamed when
//! complete (`common::outfile`).

use std::path::PathBuf;

use anyhow::Result;
use common::outfile::AtomicFile;

/// Writes to a file if one was asked for (a temporary name, renamed when
/// complete: see `common::outfile`).
pub(crate) struct OutFile(Option<AtomicFile>);

impl OutFile {
    pub(crate) fn create(path: &Option<PathBuf>) -> Result<OutFile> {
        Ok(OutFile(match path {
            Some(p) => Some(AtomicFile::create(p)?),
            None => None,
        }))
    }

    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if let Some(f) = &mut self.0 {
            f.write_all(bytes)?;
        }
        Ok(())
    }

    pub(crate) fn is_some(&self) -> bool {
        self.0.is_some()
    }

    pub(crate) fn finish(self) -> Result<()> {
        if let Some(f) = self.0 {
            f.commit()?;
        }
        Ok(())
    }
}

/// Float32 values as little-endian bytes (the `--logits-out` rows).
pub(crate) fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
