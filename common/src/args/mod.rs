//! Flag groups that tools flatten into their clap structs, beside the
//! ones of [`crate::cli`] (placement, batch, expert cache): the prefetch
//! flags and the speculative decoding flags. Their spellings, help and
//! parsers are the entries of [`crate::flags::table`].

pub mod prefetch;
pub mod speculative;
