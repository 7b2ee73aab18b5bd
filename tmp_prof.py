import time, torch, sys
torch.set_num_threads(1)
from lsrl.llrnn import train as T
model, presetname, bs = sys.argv[1], sys.argv[2], int(sys.argv[3])
tr = T.Trainer(T.preset(presetname, model, "tf_copy", batch_size=bs))
tr.current_length = tr.config.max_length
batch = tr.task.batch(bs, tr.config.max_length, torch.Generator().manual_seed(0)).to("cpu", torch.float32)
def step():
    logits = tr.net(batch.inputs); loss = T.masked_loss(logits, batch)
    tr.optimizer.zero_grad(); loss.backward(); tr.optimizer.step()
step()
ts=[]
for _ in range(3):
    t=time.process_time(); step(); ts.append(time.process_time()-t)
print(model, presetname, bs, "T=", batch.inputs.shape[1], "params", tr.parameter_count, "s/step median", sorted(ts)[1])
if len(sys.argv)>4:
    import cProfile, pstats
    cProfile.run("step()", "/tmp/prof.out")
    pstats.Stats("/tmp/prof.out").sort_stats("tottime").print_stats(15)
