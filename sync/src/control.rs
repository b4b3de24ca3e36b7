//! Local control channel.
