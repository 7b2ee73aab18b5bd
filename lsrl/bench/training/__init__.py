"""The trained tier's training: stock models trained by interchange intervention training towards a task's causal
graph (as InterpBench's SIIT does), so that their circuits are known by design.

``loop.py`` holds the one training loop (``fit``) and the measure of a trained model (``measure``);
``torch_rnn.py`` the stock ``torch.nn.LSTM`` / ``GRU`` (``train``), ``hf.py`` the stock ``transformers``
models (``train_hf``). What training measured is recorded in a folder by ``lsrl.bench.records``; the trained tier's
table (training, then the methods scored on each model) is ``lsrl.bench.trained_tier``.
"""
