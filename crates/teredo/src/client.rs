//! Client role (to come).
