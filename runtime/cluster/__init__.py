"""A Navi cluster on Ray; `local` builds a real multi-node one on a single machine."""
