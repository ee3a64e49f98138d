//! Reading request bodies off the wire into the typed models (`crate::model`).
//!
//! Nearly all of a request's time is reading its body (a datacenter of 5,000 servers with 30
//! VMs each is ~50 MB), so there are three ways in, each giving exactly the same models and
//! the same error messages:
//!
//! * **The plain reader** (serde_json, through the models' `Deserialize`): reads anything,
//!   words every error. It is the oracle the others are tested against.
//! * **The fast readers** ([`cursor`], and the server, sysinfo and VM readers in [`body`],
//!   [`sysinfo`] and [`vms`]): walk the bytes once, read ordinary servers and VMs (strings
//!   without escapes, small whole numbers, known fields) straight into their compact forms
//!   borrowing from the body, and give up on anything unusual; the plain reader then reads
//!   that value again. A VM is first read as the last VM's shape ([`vms`]'s separators: the
//!   text between its values, compared as words), field by field where it differs. A big
//!   servers array (4 MiB or more, on two cores) is read by two threads, the second from a
//!   server halfway, whose servers count only if the first thread arrives exactly there.
//!   `/capacity` bodies take the same walk; anything it does not take is read by the plain
//!   reader ([`parse_capacity_plain`]), which words the error.
//! * **Reading while arriving** ([`arriving`]): a body of 1 MiB or more (`/allocate`'s or
//!   `/capacity`'s) is parsed while the client is still sending it; each server is read as
//!   soon as its bytes are in, and once all of it is in, the rest as a whole body's (by two
//!   threads). Anything unusual (`servers` not first, a bad server, bad JSON) waits for the
//!   whole body and reads it the ordinary way.
//!
//! A server's schema verdict is worked out while it is read (its data is in cache then).
//! The fast readers share repeated short strings ([`strings`]): a datacenter's servers
//! repeat most of theirs.
//!
//! All of them read values through [`crate::js::json`], so a value serde_json refuses only
//! because it holds a lone surrogate or a number past the double range is read, in every
//! path, as `JSON.parse` reads it.

pub mod arriving;
mod body;
mod cursor;
pub mod pages;
mod strings;
mod sysinfo;
mod vms;

pub use arriving::{Arriving, Writer as ArrivingWriter};
pub use body::{
    parse_allocate_body, parse_allocate_text, parse_arriving_allocate_body, parse_arriving_capacity_body,
    parse_capacity_body, parse_capacity_plain, parse_capacity_request, parse_capacity_text, CapacityBody,
};

#[cfg(test)]
pub(crate) use body::tests::serde_fields;
