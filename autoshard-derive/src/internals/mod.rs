//! The front half of every macro, after `serde_derive`'s `internals`: the names they read
//! (`symbol`), the hidden names they generate (`names`), parsing (`attr`), the model
//! (`ast`), the rules across fields (`check`), and the error collector (`ctxt`). Nothing
//! here generates code.

pub mod ast;
pub mod attr;
pub mod check;
pub mod ctxt;
pub mod names;
pub mod symbol;
