"""Who holds what: shortest chains from the roots to a block (why) and the
dominator tree of the live heap grouped by root and allocation site
(retainers), over the reference graph the mark builds."""
