//! The service's hooks into recording ([`crate::record`]) and the shadow config
//! ([`crate::shadow`]): what of the HTTP request they need (its id, how the answer was
//! asked for, the body as received, whether a core is spare), taken here so that the
//! handler only calls them. Both act after the answer has left.

use std::sync::Arc;

use axum::http::HeaderMap;

use super::intake::Received;
use super::AppState;
use crate::batch::{allocate_batch_as, BatchOptions, VmOutcome};
use crate::engine::{Allocation, Engine, StepsFormat};
use crate::explain::ExplainOptions;
use crate::model::AllocateBody;
use crate::outcome::{AnswerError, Verdict};
use crate::record::{AnswerAsked, DecidedOn, Decision, Record};
use crate::shadow::ShadowEngine;
use crate::wire::parse_allocate_body;

/// What watches one `/allocate` request (taken when it comes in, so that a reload in the
/// meantime does not mix configs).
pub(super) struct Watch {
    request_id: String,
    recording: bool,
    /// The digest of the config that answers.
    config: String,
    steps_given: Option<StepsFormat>,
    shadow: Option<Arc<ShadowEngine>>,
    shadow_ms_per_s: u64,
}

impl Watch {
    /// `None` when nothing watches (the default): the request runs as if none of this were.
    pub(super) fn of(app: &AppState, headers: &HeaderMap, steps_given: Option<StepsFormat>) -> Option<Watch> {
        let recording = app.recorder.is_some();
        let loaded = app.read();
        if !recording && loaded.shadow.is_none() {
            return None;
        }
        let request_id = headers.get(&super::REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        Some(Watch {
            request_id,
            recording,
            config: loaded.config.digest(),
            steps_given,
            shadow: loaded.shadow.clone(),
            shadow_ms_per_s: loaded.config.shadow_cpu_ms_per_s,
        })
    }

    /// How the answer was asked for, as a record keeps it.
    pub(super) fn asked(&self, explain: Option<&ExplainOptions>) -> AnswerAsked {
        let steps = self.steps_given.map(|f| f.name().to_string());
        AnswerAsked { steps, explain: explain.map(|e| e.why_not.clone().unwrap_or_default()) }
    }

    /// Decides the request again with the shadow config, if there is one, when a core and
    /// an allocation permit are spare.
    pub(super) fn shadow(&self, app: &AppState, request: &AllocateBody<'_>, allocation: &Allocation) {
        let Some(shadow) = &self.shadow else { return };
        let core = app.cpu_slots.clone().try_acquire_owned().ok();
        let spare = core.is_some() && app.permits.available_permits() > 0;
        let stats = &app.shadow_stats;
        crate::shadow::evaluate(shadow, stats, self.shadow_ms_per_s, spare, request, allocation, &self.request_id);
    }

    /// Places a batch again with the shadow config, if there is one, when a core and an
    /// allocation permit are spare: its body read anew (the answer's run consumed the
    /// parsed one), with the answer's seed and the uuids it gave the VMs.
    pub(super) fn shadow_batch(&self, app: &AppState, received: &Received, seed: Option<u64>, main: &[VmOutcome]) {
        let Some(shadow) = &self.shadow else { return };
        let core = app.cpu_slots.clone().try_acquire_owned().ok();
        let spare = core.is_some() && app.permits.available_permits() > 0;
        let limits = app.limits();
        let place = |engine: &Engine| -> Result<Vec<VmOutcome>, String> {
            let bytes = match received {
                Received::Whole(bytes) => &bytes[..],
                Received::Arriving(body) => body.complete().ok_or("the body did not arrive whole")?,
            };
            let mut request = parse_allocate_body(bytes).map_err(|e| AnswerError::from(e).to_string())?;
            request.seed = seed;
            let uuids: Vec<String> = main.iter().map(|vm| vm.uuid.clone()).collect();
            // The compact steps: the cheapest answer to write (only the decisions are read).
            let options = BatchOptions { steps: Some(StepsFormat::Removed), count: None };
            let answer = allocate_batch_as(engine, &limits, request, options, &uuids).map_err(|e| e.to_string())?;
            Ok(answer.vms)
        };
        let stats = &app.shadow_stats;
        crate::shadow::evaluate_batch(shadow, stats, self.shadow_ms_per_s, spare, main, &self.request_id, place);
    }

    /// Hands the request to the recorder (when recording), with what was answered.
    pub(super) fn record(
        &self,
        app: &AppState,
        received: Received,
        asked: AnswerAsked,
        answered: (Verdict, String, Option<u64>),
    ) {
        if !self.recording {
            return;
        }
        let body = match received {
            Received::Whole(bytes) => bytes.into_vec(),
            Received::Arriving(body) => match body.complete() {
                Some(bytes) => bytes.to_vec(),
                None => return,
            },
        };
        self.record_body(app, body, asked, answered, None);
    }

    /// Whether requests are recorded.
    pub(super) fn recording(&self) -> bool {
        self.recording
    }

    /// How an inventory allocation's answer was written (its steps' form is always known).
    pub(super) fn asked_as(&self, steps: StepsFormat, explain: Option<&ExplainOptions>) -> AnswerAsked {
        let mut asked = self.asked(explain);
        asked.steps = Some(steps.name().to_string());
        asked
    }

    /// Hands `body` to the recorder (when recording), with what was answered and (inventory
    /// mode) what it was decided on beyond the body.
    pub(super) fn record_body(
        &self,
        app: &AppState,
        body: Vec<u8>,
        asked: AnswerAsked,
        answered: (Verdict, String, Option<u64>),
        decided_on: Option<DecidedOn>,
    ) {
        let (Some(recorder), true) = (&app.recorder, self.recording) else { return };
        let (verdict, answer_digest, seed) = answered;
        recorder.offer(Record {
            request_id: self.request_id.clone(),
            config: self.config.clone(),
            seed,
            asked,
            status: verdict.status(),
            decision: Decision::from(&verdict),
            answer_digest,
            body,
            decided_on,
        });
    }
}

/// Gives the request a seed when it has none, so that its random draws can be made again:
/// the configured one, or a fresh one (as the engine would draw).
pub(super) fn fix_seed(request: &mut AllocateBody<'_>, engine: &Engine) {
    if request.seed.is_none() {
        request.seed = Some(engine.defaults().seed.unwrap_or_else(rand::random));
    }
}
