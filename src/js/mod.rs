//! JavaScript emulation: everything of JavaScript the original allocator's answers depend on.
//!
//! The original is a Node.js program, and which servers pass and the exact reason strings
//! follow from JavaScript's rules, not from allocation logic. Those rules live here, once:
//!
//! * [`value`]: request fields the original reads loosely are [`Js`] values; truthiness,
//!   numeric coercion, `String(x)`, `Number.prototype.toFixed`, `<`/`>=` on mixed types, `+`
//!   that may concatenate, `JSON.stringify`, property order of objects.
//! * [`sort`]: `Array.prototype.sort` exactly as V8 runs it (TimSort; a comparator returning
//!   NaN counts as "equal"), because the original's comparators are not always consistent.
//! * [`json`]: `JSON.parse` where serde_json refuses what it read (lone surrogates, numbers
//!   beyond the double range), and `JSON.stringify`'s escapes for lone surrogates.
//! * [`date`]: `new Date(text)` for ISO strings and `toISOString()` (the reboot scorers).
//! * [`regex`]: JavaScript regular expressions (`re` affinities) translated to
//!   `fancy-regex`'s dialect and compiled with bounded size and backtracking.
//! * [`sandbox`]: the embedded QuickJS that runs operators' code (custom plugins, owner
//!   filters) under a time and memory budget; [`present`]: the servers as that code sees
//!   them; [`owner_filter`]: `filter_owner_server` snippets compiled and run in it as the
//!   original ran them.
//!
//! Step reasons are a JavaScript object in the original (insertion order; a repeated key keeps
//! its first place and takes the last message): `engine::reasons` keeps exactly that, in a
//! form cheap enough for thousands of servers per step.

pub mod date;
pub mod json;
pub mod owner_filter;
pub mod present;
pub mod regex;
mod regex_blocks;
pub mod sandbox;
pub mod sort;
pub mod value;

pub use value::*;
