//! Arbitrary bytes through the three body readers: the whole-body reader (fast readers with
//! the plain reader behind them), the reader of a body still arriving (in pieces of every
//! size), and the plain reader alone on each server. They must agree: same accept/reject,
//! same parsed request, and no panic. The same bytes as a `/capacity` body: its fast walk
//! and its plain reader agree.
#![no_main]

use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock};

use dapi::model::Server;
use dapi::wire::{
    parse_allocate_body, parse_arriving_allocate_body, parse_capacity_plain, parse_capacity_request, Arriving,
    ArrivingWriter,
};
use libfuzzer_sys::fuzz_target;

/// A body to write into an arriving one, in pieces of a size.
type Job = (ArrivingWriter, Vec<u8>, usize);

/// The one writer thread, kept for the whole run: a thread spawned per input made
/// LeakSanitizer report std's own bookkeeping of exited threads (a false positive that
/// stopped the fuzzer).
fn writer() -> &'static Mutex<Sender<Job>> {
    static WRITER: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();
    WRITER.get_or_init(|| {
        let (jobs, received) = channel::<Job>();
        std::thread::spawn(move || {
            for (mut writer, body, piece) in received {
                for chunk in body.chunks(piece.max(1)) {
                    writer.push(chunk);
                }
                writer.finish();
            }
        });
        Mutex::new(jobs)
    })
}

fn arriving(body: &[u8], piece: usize) -> String {
    let (arriving, writer_end) = Arriving::new(body.len());
    let sent = writer().lock().map(|jobs| jobs.send((writer_end, body.to_vec(), piece)).is_ok());
    assert!(matches!(sent, Ok(true)), "the writer thread runs");
    format!("{:?}", parse_arriving_allocate_body(&arriving))
}

/// A `/capacity` reader's result as Debug text, the cached schema verdicts worked out.
fn capacity(read: Result<dapi::wire::CapacityBody<'_>, dapi::model::BodyError>) -> String {
    if let Ok(body) = &read {
        for server in &body.servers {
            server.schema_violation();
        }
    }
    format!("{read:?}")
}

fuzz_target!(|input: &[u8]| {
    // The first byte picks the piece size the arriving body is written in.
    let Some((&piece, body)) = input.split_first() else { return };
    assert_eq!(capacity(parse_capacity_request(body)), capacity(parse_capacity_plain(body)), "capacity: fast vs plain");
    let whole = parse_allocate_body(body);
    assert_eq!(arriving(body, piece as usize + 1), format!("{whole:?}"), "arriving vs whole");
    if let Ok(request) = &whole {
        for (raw, fast) in request.raw_servers.iter().zip(&request.servers) {
            let plain: Server =
                dapi::js::json::from_str(raw).expect("a server the fast readers took, the plain reader takes");
            // The schema verdict is cached on first use: work it out on both before comparing.
            assert_eq!(plain.schema_violation(), fast.schema_violation(), "schema verdict of {raw}");
            let (plain, fast) = (format!("{plain:?}"), format!("{fast:?}"));
            if plain != fast {
                let at = plain.bytes().zip(fast.bytes()).take_while(|(a, b)| a == b).count().saturating_sub(80);
                let window = |s: &str| s.get(at..).unwrap_or("").chars().take(400).collect::<String>();
                panic!("fast vs plain reader of {raw}\nplain: …{}\nfast:  …{}", window(&plain), window(&fast));
            }
        }
    }
});
