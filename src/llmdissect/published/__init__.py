"""Published results shipped with the package and the check of every estimate against them
(`llmdissect validate --published`; docs/published.md). Imports no torch."""
