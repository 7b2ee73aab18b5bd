import time, torch, sys
torch.set_num_threads(1)
from lsrl.llrnn import train as T
tr = T.Trainer(T.preset("tf", "ntm", "tf_copy", batch_size=250))
batch = tr.task.batch(250, 28, torch.Generator().manual_seed(0)).to("cpu", torch.float32)
from torch.profiler import profile, ProfilerActivity
def step():
    logits = tr.net(batch.inputs); loss = T.masked_loss(logits, batch)
    tr.optimizer.zero_grad(); loss.backward(); tr.optimizer.step()
step()
with profile(activities=[ProfilerActivity.CPU]) as prof:
    step()
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18))
