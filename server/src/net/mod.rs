//! Transport that knows no sessions, users or configuration: how client connections are served,
//! deadlines, the WebSocket relay, connections to editors, and the client for outbound HTTPS.
//! May import: `util`.

pub mod deadline;
pub mod outbound;
pub mod relay;
pub mod serving;
pub mod upstream;
