"""Reading a committed output back, without Beam and (except where asked for) without
TensorFlow: `read_examples`, `tf_dataset`, `torch_dataset` and `grain_source`, each in a
module of its own, over the shared manifest, layout, part and record readers."""
