package bench

// OverCeilingPct is the percentage of a ceiling above which a rate is
// reported with a warning: a ceiling is meant to be an upper bound, and a
// rate well above it says that the ceiling was not (the wrong kind for the
// work, a cache, a loaded machine when it was measured).
const OverCeilingPct = 105
