//! The client's side of HTTPCrypt, without IO (spec §4, §7, §8, §11, §14).
//!
//! - [`prepared`]: one exchange: the credential, `k`, the cookie and path,
//!   sealing the request and opening its answer ([`PreparedRequest`]);
//! - [`head`]: the inner request head the client sends ([`request_head`]);
//! - [`engine`]: what the client keeps per server ([`HostState`]: keys,
//!   ticket, token, clock offset, admission cookie) and what each refusal
//!   or problem answer means for it;
//! - [`retry`]: when a call sends again ([`Attempts`]);
//! - [`pq`]: suite 2 (spec/hybrid.md H4, H5): the mode ([`Pq`]), the
//!   suite-2 keys, the pin and the encapsulation keys learnt ([`PqState`]).
//!
//! An IO driver (the `httpcrypt` crate's `Client`) finds keys, sends the
//! outer request and reads the answer; every decision about what goes on
//! the wire and what an answer means is made here.

pub mod engine;
pub mod head;
pub mod pq;
pub mod prepared;
pub mod retry;

pub use crate::outer::{fits_get_form, fits_get_form_for};
pub use engine::{
    is_own_field, judge_refusal, needs_problem_body, options_max_age, HostState, Refusal,
    ShortPolicy, ShortUse, PROBLEM_LIMIT, SHORT_TICKET_MAX_AGE, SHORT_TICKET_REUSE,
};
pub use head::{request_head, HeadPlan};
pub use pq::{HybridKey, KemCache, Pq, PqState, ServerKey, Suite};
pub use prepared::{ClientCredential, PreparedRequest};
pub use retry::{is_idempotent, Attempts, Retry};
