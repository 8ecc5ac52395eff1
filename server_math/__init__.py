"""The server's maths, in plain PyTorch, below the methods and the strategies
(docs/extending.md#layout): the update arithmetic (`server_update`: weights, the look-ahead, the
server step, global GC), the robust rules (`robust`), the screening of every reply before any
rule sees it (`reply_screen`, with the declarations it screens against in `records`), the limits
on what one good reply can do (`influence`), the checks of what nodes report of their partitions
(`node_reports`), and the one pass over the replies for their norms and weighted mean
(`reply_pass`). It names no method and imports neither `methods` nor
`strategies`; the methods' server rules and the round loop both build on it.
Nothing is imported here, so that `records` stays free of torch.
"""

import fedacg_gc  # noqa: F401  (first: a module that shadows one of ours is named)
# isort: split
