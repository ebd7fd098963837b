"""The request protocol both phases share: the deletion request on the wire (:mod:`.request`), the
deletion topics and how a request picks its partition and topic (:mod:`.topics`), namespace scope
(:mod:`.scope`), the one reference model of what keeps a ledger alive (:mod:`.references`), and the
words for a request's fate that every surface shares (:mod:`.fate`).
Nothing here does I/O of its own: the mark phase, the delete phase, the orphan scan and the CLI
build on these definitions, so a request means the same thing wherever it is read.
"""
