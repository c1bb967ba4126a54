"""Re-selection when load shifts (docs/reselection.md): a controller that re-runs a selector on the
cluster as it stands and migrates (``controller``), the bookkeeping of instances that start,
serve, drain and are released (``ledger``), day-long workloads (``diurnal``), and the two
backends the same controller drives: the cluster simulator (``sim``) and real servers (``live``)."""
