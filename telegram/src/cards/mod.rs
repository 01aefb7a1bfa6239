//! Cards in Telegram (issue #14): every owner card of the card model
//! ([`silas_core::cards::CardPayload`]) as a MarkdownV2 message with an
//! inline keyboard, and the mapping back from a pressed button or a typed
//! §4.1 fallback answer to the typed answer the card lifecycle or the
//! ApprovalEngine takes. Pure: no I/O; the daemon stores the render's
//! handle and nonce, checks presses with `policy::callback`, and edits the
//! message to [`outcome_line`] once answered.
//!
//! What a button may do is policy: a card above
//! `channels.telegram.max_approval_risk` gets no affirmative button (only
//! its safe side and a link to the web app's Review), and the daemon must
//! still refuse an affirmative answer to it ([`approvable_here`] and
//! [`is_affirmative`]) since a typed "approve" needs no button. A secret is
//! never asked for in the chat: a secure-input card is a link to the web
//! app's secure form and has no answer here.

mod answer;
mod render;

pub use answer::{
    CardAnswer, answer_for_button, answer_for_text, approvable_here, is_affirmative, outcome_line,
    timed_out_line,
};
pub use render::{MAX_BUTTON_LABEL, RenderContext, RenderedCard, render};

#[cfg(test)]
mod tests;
