//! The rspamd compatibility profile (`spec/rspamd-profile.md`).
