"""What a team keeps across campaigns: the hash-chained ledger and the regression history.

:mod:`~h3bench.ledger.entries` derives one entry per candidate and duration
from a sealed bundle, :mod:`~h3bench.ledger.chain` is the hash chain and reads it,
:mod:`~h3bench.ledger.append` appends a bundle's entries and
:mod:`~h3bench.ledger.verify` checks them against their bundles,
:mod:`~h3bench.ledger.campaigns` knows the shards and pools of a campaign
over several hosts as one campaign,
:mod:`~h3bench.ledger.history` follows the baseline over campaigns,
:mod:`~h3bench.ledger.changepoint` finds its steps and
:mod:`~h3bench.ledger.plot` draws them.
"""
