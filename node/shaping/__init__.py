"""User-space link shaping: the shaper that delays what a node sends to one peer, applied to byte streams, and
the transparent shaping proxy."""
