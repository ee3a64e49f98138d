//! Arbitrary bytes through the three body readers: the whole-body reader (fast readers with
//! the plain reader behind them), the reader of a body still arriving (in pieces of every
//! size), and the plain reader alone on each server. They must agree: same accept/reject,
//! same parsed request, and no panic. The same bytes as a `/capacity` body: its fast walk
//! and its plain reader agree.
#![no_main]

use dapi::model::Server;
use dapi::wire::{
    parse_allocate_body, parse_arriving_allocate_body, parse_capacity_plain, parse_capacity_request, Arriving,
};
use libfuzzer_sys::fuzz_target;

fn arriving(body: &[u8], piece: usize) -> String {
    let (arriving, mut writer) = Arriving::new(body.len());
    std::thread::scope(|scope| {
        scope.spawn(move || {
            for chunk in body.chunks(piece.max(1)) {
                writer.push(chunk);
            }
            writer.finish();
        });
        format!("{:?}", parse_arriving_allocate_body(&arriving))
    })
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
