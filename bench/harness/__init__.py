"""The benchmark harness behind scripts/bench, split by role. Each module imports only modules
listed above it (bench/layers.py checks that the imports form no cycle; --smoke runs it):

  process        processes and /proc: start/stop, CPU, RSS, load; the harness's log and error
  kafka          the harness's Kafka clients: topics, watermarks, read-backs, broker warm-up
  metrics        a running bridge's /metrics
  servers        MongoDB (SecantusDB) and the broker (Apache Kafka, noida-db) of a run
  systems        the systems under test and the run's context (Harness: options, servers,
                 results; the Rust bench program; the bridge and baselines started alike)
  peers          debezium and mongo-kafka under Kafka Connect (bench/peers/connect.py)
  catchup        measure: the catch-up block
  live           measure: the live block and the Kafka outage
  snapshot       measure: the copy (initial snapshot) block
  group          measure: the group (many replicas) block
  eos            measure: the exactly-once block
  figures        min / median / max and ratios within a run
  report_blocks  report: the copy, group and exactly-once tables
  report         report: results.md (header, catch-up, live, peers, targets)
  cli            command line: options, presets, the run, results files
"""
