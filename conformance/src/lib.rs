//! prox-conformance: locating the shared fixtures (`../shared/conformance`,
//! overridable with `PROX_SHARED`) for the conformance test suite.
