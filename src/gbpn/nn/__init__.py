"""Empty. The layers are imported from :mod:`gbpn`, one path each (``from gbpn import GBPN, MLP,
BeliefPropagation, Coupling, clear_graph_caches``). This package stays only while the import
contract in pyproject.toml names ``gbpn.nn`` among its layers; delete both together."""
