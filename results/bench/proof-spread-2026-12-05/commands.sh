# run from the repository root; OLD = a worktree of a74422e (the first bench run's code)
D=results/bench/proof-spread-2026-12-05
python results/bench/proof_spread.py --write iclr-2p/6.2b-p8-m24 $D/iclr-2p-6.2b-p8-m24.json
python results/bench/proof_spread.py --write iclr-2p/14.6b-p16-m48 $D/iclr-2p-14.6b-p16-m48.json
{ uptime
  python results/bench/proof_spread.py $D/iclr-2p-6.2b-p8-m24.json 8
  PYTHONPATH=OLD python results/bench/proof_spread.py $D/iclr-2p-6.2b-p8-m24.json 8
  python results/bench/proof_spread.py $D/iclr-2p-14.6b-p16-m48.json 5
  PYTHONPATH=OLD python results/bench/proof_spread.py $D/iclr-2p-14.6b-p16-m48.json 5
  uptime; } > $D/spread.txt
P='{"transitive_precedences_work_limit": 1000000}'
{ uptime
  python results/bench/proof_spread.py $D/iclr-2p-6.2b-p8-m24.json 8 "$P"
  python results/bench/proof_spread.py $D/iclr-2p-14.6b-p16-m48.json 5 "$P"
  uptime; } > $D/spread-tp-default.txt
# 45 s per solve, two runs at each of six revisions, one after the other (OLD = a worktree
# checked out at each revision in turn; HEAD = c067e0e)
{ uptime
  for rev in a74422e 804f3c1 1e6070b 89927ca 8db9670 HEAD; do
    git -C OLD checkout -q --detach $(git rev-parse $rev)
    echo "# $rev $(git log -1 --format=%cd --date=iso $rev)"
    PYTHONPATH=OLD python results/bench/proof_spread.py --limit 45 $D/iclr-2p-14.6b-p16-m48.json 2
  done
  uptime; } > $D/spread-45s.txt
