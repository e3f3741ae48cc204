"""Reading a committed output back, without Beam and (except where asked for) without
TensorFlow: `output` (the manifest, feature spec and shards of a split), `parts` (a split cut
into disjoint parts), `features` (the dense-or-varlen rule), `records` and `decode` (records
to numpy values), and one module per consumer: `examples` (`read_examples`), `tensorflow`
(`tf_dataset`), `torch` (`torch_dataset`) and `grain` (`grain_source`).
"""
