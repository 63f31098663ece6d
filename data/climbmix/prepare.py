"""
Prepare ClimbMix as GPT-2 token bins: data/climbmix/{train,val}.bin and meta.json.

    python data/climbmix/prepare.py --max_tokens 134e9               # the fast 6.7B recipe's whole budget
    python data/climbmix/prepare.py --source '/disk/climbmix/shard_0*.parquet'   # shards downloaded beforehand

Source: karpathy/climbmix-400b-shuffle on the Hugging Face hub, the re-packaging nanochat trains on: NVIDIA's
ClimbMix as raw text in 6,543 shuffled parquet shards (shard_00000 ... shard_06542), the document in 'text'.
NVIDIA's own release, nvidia/Nemotron-ClimbMix (also reachable as nvidia/ClimbMix), is not text: it holds
GPT-2 token ids in jsonl (its card points to a detokenising script), which the shared text job cannot read,
so this script reads the shuffled text copy. Being shuffled, its first shards are a random sample, which
--max_tokens can take as is.

What it is: ClimbMix (Diao et al., CLIMB, arXiv 2504.13161) is 400B tokens chosen from Nemotron-CC and
SmolLM-Corpus: documents embedded and clustered into topic groups, each group scored by an advertisement and
an educational-value classifier, low groups dropped and the rest mixed with weights searched on small
proxy models. The bins take ~800 GB at 2 bytes a token for all 400B; take --max_tokens of it.

Licence: CC-BY-NC-4.0 on NVIDIA's card, "for research and development only": no commercial use. The
shuffled copy carries NVIDIA's data, so the same terms apply to it.

Caveats: NVIDIA's figures (a 1B model's continued training on it scoring 2% above Llama-3.2-1B, a 1B model
from scratch scaling better on it than on other sets at equal tokens) are their own evaluation; nanochat's switch from FineWeb-Edu to it cut its time to GPT-2 quality
from 2h46 to 2h01 (karpathy/nanochat dev/LOG.md). English web text only. No val split is published: val.bin
is carved out of train by --val_fraction, by a hash of each document. The resumable job, flags and output
are those of data/pile/prepare.py. The hub could not be reached from the machine this was built on: the hub
path is untested; local parquet files are tested (tests/test_climbmix.py).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from trainer import preparation  # noqa: E402  (needs the repo root on sys.path first)

if __name__ == "__main__":
    preparation.main(__doc__, source="karpathy/climbmix-400b-shuffle", data_dir="data/climbmix")
