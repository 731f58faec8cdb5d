"""LSP glue: turns analysis results, generated edits and verification runs into editor features.

Only this package and `lsp_server.server` import pygls / lsprotocol. Each module owns one feature
(or one translation, such as `positions`); handlers take the server first and return `None` when
there is nothing to show.
"""
