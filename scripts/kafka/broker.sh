# shellcheck shell=bash
# Apache Kafka for scripts/services (sourced by it; not run on its own).
#
# Pieces:
#   kafka_jars      resolve the broker's jars from Maven Central into the cache (first use only)
#   kafka_props     write one node's server.properties (KRaft, combined broker and controller)
#   kafka_format    format a node's log dir once (kafka.tools.StorageTool), SCRAM users included
#   kafka_command   the java command line of one node
#
# A cluster is 1 or 3 nodes. Node 1 is server "kafka" (its pid file is kafka.pid, as for the
# other brokers), nodes 2 and 3 are "kafka2" and "kafka3". Every node is broker and controller,
# and the controllers form a static quorum (controller.quorum.voters) of all nodes. Settings
# follow the broker's documented defaults except where a test server needs otherwise; each
# exception is commented in kafka_props.
#
# Uses from scripts/services: ROOT, CACHE_DIR, INST, NAME, conf_get, conf_set, datadir, logfile,
# pick_free_ports, say, die, now, since.

KAFKA_VERSION=4.4.0
KAFKA_HOME=$CACHE_DIR/kafka-$KAFKA_VERSION
KAFKA_LIBS=$KAFKA_HOME/libs
KAFKA_M2=${MKB_MAVEN_REPO:-$CACHE_DIR/m2}
KAFKA_POM=$ROOT/scripts/kafka/pom.xml
KAFKA_LOG4J=$ROOT/scripts/kafka/log4j2.yaml
# The SCRAM users of a --kafka-security cluster (test credentials, loopback only).
KAFKA_ADMIN_USER=mkb-admin
KAFKA_ADMIN_PASSWORD=mkb-admin-secret
KAFKA_BRIDGE_USER=mkb-bridge
KAFKA_BRIDGE_PASSWORD=mkb-bridge-secret

# Node names of a cluster of N nodes: kafka kafka2 kafka3.
kafka_node_names() { # N
  local i
  printf 'kafka\n'
  for ((i = 2; i <= $1; i++)); do printf 'kafka%d\n' "$i"; done
}
kafka_node_index() { # SERVER -> 1, 2, 3
  if [[ $1 == kafka ]]; then printf '1'; else printf '%s' "${1#kafka}"; fi
}
is_kafka_node() { [[ $1 == kafka || $1 =~ ^kafka[2-9]$ ]]; }

# The jars, once per cache: `mvn dependency:copy-dependencies` on scripts/kafka/pom.xml, into a
# Maven repository of ours (never ~/.m2). The stamp holds the pom's hash: editing it refreshes.
kafka_jars() {
  local want stamp=$KAFKA_HOME/.mkb-resolved t0
  want=$(sha256sum "$KAFKA_POM" | cut -d' ' -f1)
  command -v java >/dev/null ||
    die "--broker kafka needs Java 17 or newer on PATH (Debian/Ubuntu: apt-get install openjdk-17-jre-headless), or use --broker noida"
  [[ -f $stamp && $(<"$stamp") == "$want" && (-f $KAFKA_HOME/kafka.jsa || -f $KAFKA_HOME/kafka.jsa.failed) ]] &&
    return 0
  mkdir -p "$KAFKA_HOME"
  exec 6>"$KAFKA_HOME.lock"
  flock -w 900 6 || die "timed out waiting for another scripts/services to resolve Kafka's jars"
  if ! [[ -f $stamp && $(<"$stamp") == "$want" ]]; then
    command -v mvn >/dev/null ||
      die "--broker kafka resolves Apache Kafka's jars with Maven on first use (Debian/Ubuntu: apt-get install maven), or use --broker noida"
    t0=$(now)
    say "resolving Apache Kafka $KAFKA_VERSION from Maven Central into $KAFKA_LIBS (first use only: ~45 MB of jars, ~100 MB in $KAFKA_M2, 10-60 s)"
    rm -rf "$KAFKA_LIBS" "$stamp"
    mvn -q -B -Dstyle.color=never -f "$KAFKA_POM" dependency:copy-dependencies \
      -Dmaven.repo.local="$KAFKA_M2" -DoutputDirectory="$KAFKA_LIBS" >"$KAFKA_HOME.mvn.log" 2>&1 ||
      die "mvn could not resolve Apache Kafka $KAFKA_VERSION (needs access to Maven Central); see $KAFKA_HOME.mvn.log"
    [[ -n $(compgen -G "$KAFKA_LIBS/kafka_2.13-*.jar") ]] || die "no kafka_2.13 jar in $KAFKA_LIBS after mvn"
    printf '%s' "$want" >"$stamp"
    rm -f "$KAFKA_HOME/kafka.jsa" "$KAFKA_HOME/kafka.jsa.failed"
    say "Apache Kafka $KAFKA_VERSION resolved ($(since "$t0") s)"
  fi
  kafka_cds
  exec 6>&-
}

# server.properties of one node. NODES, PORT and CTL ports come from the instance conf.
kafka_props() { # SERVER
  local s=$1 idx nodes rf min_isr voters="" i n auto sec port ctl
  idx=$(kafka_node_index "$s")
  nodes=$(conf_get kafka_nodes 1)
  port=$(conf_get "${s}_port")
  ctl=$(conf_get "${s}_ctl_port")
  rf=$nodes
  min_isr=$((nodes > 1 ? 2 : 1))
  i=1
  while read -r n; do
    voters+="${voters:+,}$i@127.0.0.1:$(conf_get "${n}_ctl_port")"
    i=$((i + 1))
  done < <(kafka_node_names "$nodes")
  auto=$(conf_get kafka_auto_create on)
  sec=$(conf_get kafka_security off)
  {
    printf '# Written by scripts/services for instance %s, node %s of %s. Regenerated at each start.\n' "$NAME" "$idx" "$nodes"
    printf 'process.roles=broker,controller\nnode.id=%s\ncontroller.quorum.voters=%s\n' "$idx" "$voters"
    printf 'controller.listener.names=CONTROLLER\ninter.broker.listener.name=PLAINTEXT\n'
    if [[ $sec == on ]]; then
      local sasl ssl
      sasl=$(conf_get "${s}_sasl_port")
      ssl=$(conf_get "${s}_ssl_port")
      printf 'listeners=PLAINTEXT://127.0.0.1:%s,CONTROLLER://127.0.0.1:%s,SASL_SSL://127.0.0.1:%s,SSL://127.0.0.1:%s\n' \
        "$port" "$ctl" "$sasl" "$ssl"
      printf 'advertised.listeners=PLAINTEXT://127.0.0.1:%s,SASL_SSL://127.0.0.1:%s,SSL://127.0.0.1:%s\n' \
        "$port" "$sasl" "$ssl"
      printf 'listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL\n'
      # SCRAM-SHA-512 over TLS on SASL_SSL; TLS alone (the certificate's principal) on SSL.
      printf 'sasl.enabled.mechanisms=SCRAM-SHA-512\n'
      printf 'listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;\n'
      printf 'ssl.keystore.type=PKCS12\nssl.keystore.location=%s\nssl.keystore.password=%s\n' \
        "$INST/tls/broker.p12" "$(conf_get kafka_tls_password)"
      printf 'ssl.client.auth=none\n'
      # ACLs: the PLAINTEXT listener (the tests' own clients, the controllers) and the admin user
      # are super users; the bridge's user gets exactly the README's ACLs (granted by the test).
      printf 'authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n'
      printf 'super.users=User:ANONYMOUS;User:%s\n' "$KAFKA_ADMIN_USER"
    else
      printf 'listeners=PLAINTEXT://127.0.0.1:%s,CONTROLLER://127.0.0.1:%s\n' "$port" "$ctl"
      printf 'advertised.listeners=PLAINTEXT://127.0.0.1:%s\n' "$port"
      printf 'listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n'
    fi
    printf 'log.dirs=%s\n' "$(datadir "$s")"
    printf 'num.partitions=1\ndefault.replication.factor=%s\nmin.insync.replicas=%s\n' "$rf" "$min_isr"
    # Internal topics: a replication factor the cluster can hold (the default 3 leaves a one-node
    # cluster without a group or transaction coordinator), and fewer partitions than the default 50,
    # which a test server creates on first use for nothing.
    printf 'offsets.topic.replication.factor=%s\noffsets.topic.num.partitions=10\n' "$rf"
    printf 'transaction.state.log.replication.factor=%s\ntransaction.state.log.min.isr=%s\n' "$rf" "$min_isr"
    printf 'transaction.state.log.num.partitions=10\n'
    printf 'share.coordinator.state.topic.replication.factor=%s\nshare.coordinator.state.topic.min.isr=%s\n' "$rf" "$min_isr"
    # Tests: a group's first rebalance starts at once (default 3 s), and the coordinator aborts a
    # timed-out transaction within a second (default 10 s) so the coordinator-timeout path is seen.
    printf 'group.initial.rebalance.delay.ms=0\n'
    printf 'transaction.abort.timed.out.transaction.cleanup.interval.ms=1000\n'
    printf 'auto.create.topics.enable=%s\n' "$([[ $auto == on ]] && echo true || echo false)"
    # Two cores: fewer threads than the defaults (3 network, 8 I/O) keep the broker's share fair.
    printf 'num.network.threads=2\nnum.io.threads=4\nbackground.threads=4\n'
  } >"$INST/$s.properties"
}

# The instance's cluster id, made once (every node is formatted with it).
kafka_cluster_id() {
  [[ -n $(conf_get kafka_cluster_id) ]] && return 0
  # Like Kafka's Uuid.randomUuid: URL-safe base64 of 16 random bytes, never starting with "-"
  # (kafka-storage would read such an id as an option: "--cluster-id: expected one argument").
  conf_set kafka_cluster_id "$(python3 -c 'import base64, uuid
while True:
    cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not cid.startswith("-"):
        print(cid)
        break')"
}

# Formats a node's log dir unless it already is (a restart keeps its data). Runs in parallel
# for the nodes of a cluster: kafka_cluster_id comes first.
kafka_format() { # SERVER
  local s=$1 dir cid
  dir=$(datadir "$s")
  [[ -f $dir/meta.properties ]] && return 0
  cid=$(conf_get kafka_cluster_id)
  [[ -n $cid ]] || die "no cluster id for instance '$NAME' (kafka_cluster_id)"
  mkdir -p "$dir"
  local -a extra=()
  if [[ $(conf_get kafka_security off) == on ]]; then
    extra=(--add-scram "SCRAM-SHA-512=[name=$KAFKA_ADMIN_USER,password=$KAFKA_ADMIN_PASSWORD]"
      --add-scram "SCRAM-SHA-512=[name=$KAFKA_BRIDGE_USER,password=$KAFKA_BRIDGE_PASSWORD]")
  fi
  local -a cds=()
  [[ ! -f $KAFKA_HOME/kafka.jsa ]] || cds=(-XX:SharedArchiveFile="$KAFKA_HOME/kafka.jsa" -Xshare:auto)
  java -Xmx256m -XX:TieredStopAtLevel=1 "${cds[@]}" -Dlog4j2.configurationFile="$KAFKA_LOG4J" -cp "$KAFKA_LIBS/*" \
    kafka.tools.StorageTool format --cluster-id "$cid" --config "$INST/$s.properties" \
    --ignore-formatted "${extra[@]}" >>"$(logfile "$s")" 2>&1 ||
    die "formatting $dir failed; see $(logfile "$s")"
}

# A self-signed certificate for the SSL listener (keytool, from the JDK), and the CA file clients
# trust. Once per instance.
kafka_tls() {
  local tls=$INST/tls pw
  [[ -f $tls/broker.p12 && -f $tls/ca.pem ]] && return 0
  mkdir -p "$tls"
  pw=$(python3 -c 'import secrets; print(secrets.token_hex(12))')
  conf_set kafka_tls_password "$pw"
  keytool -genkeypair -alias broker -keyalg RSA -keysize 2048 -validity 3650 \
    -dname "CN=localhost" -ext "SAN=dns:localhost,ip:127.0.0.1" \
    -storetype PKCS12 -keystore "$tls/broker.p12" -storepass "$pw" -keypass "$pw" >/dev/null 2>&1 ||
    die "keytool could not make the test broker's certificate"
  keytool -exportcert -rfc -alias broker -keystore "$tls/broker.p12" -storepass "$pw" -file "$tls/ca.pem" >/dev/null 2>&1 ||
    die "keytool could not export the test broker's certificate"
}

# The JVM options of a node. MKB_KAFKA_JIT=quick (the default, for tests): the client compiler
# only and the serial collector, which start the broker in about half the CPU time and leave the
# machine's cores to the tests; full (the benchmark): Kafka's own kafka-run-class.sh options
# (G1, both compilers). Both use the class-data archive when there is one (kafka_cds).
kafka_jvm_options() {
  local -a opts
  if [[ -n ${MKB_KAFKA_JVM_OPTS:-} ]]; then
    # shellcheck disable=SC2206
    opts=($MKB_KAFKA_JVM_OPTS)
  elif [[ ${MKB_KAFKA_JIT:-quick} == full ]]; then
    opts=(-Xms256m "-Xmx${MKB_KAFKA_HEAP:-768m}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20
      -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15)
  else
    opts=(-Xms128m "-Xmx${MKB_KAFKA_HEAP:-768m}" -XX:+UseSerialGC -XX:TieredStopAtLevel=1)
  fi
  opts+=(-XX:+ExitOnOutOfMemoryError)
  [[ ! -f $KAFKA_HOME/kafka.jsa ]] || opts+=(-XX:SharedArchiveFile="$KAFKA_HOME/kafka.jsa" -Xshare:auto)
  printf '%s\n' "${opts[@]}"
}

# The node's command line (sets the caller's `cmd` array).
kafka_command() { # SERVER
  local s=$1
  local -a jvm
  mapfile -t jvm < <(kafka_jvm_options)
  cmd=(java "${jvm[@]}" -Djava.awt.headless=true -Dlog4j2.configurationFile="$KAFKA_LOG4J"
    -cp "$KAFKA_LIBS/*" kafka.Kafka "$INST/$s.properties")
}

# A class-data archive of the broker's classes (JDK's AppCDS, -XX:ArchiveClassesAtExit), made
# once per cache by a broker started and stopped for it: later JVMs (brokers, the storage tool)
# map the classes instead of loading them, measured 7.0 -> 4.2 s of CPU to start a broker.
# Without it (a failure here is only reported) everything works, more slowly.
kafka_cds() {
  local jsa=$KAFKA_HOME/kafka.jsa dir pid port ctl i
  [[ -f $jsa || -f $jsa.failed ]] && return 0
  dir=$(mktemp -d "$KAFKA_HOME/cds.XXXXXX")
  port=$(pick_free_ports 2 | tr '\n' ' ')
  read -r port ctl <<<"$port"
  cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$ctl
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$ctl
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
PROPS
  say "making the broker's class-data archive $jsa (first use only, 10-30 s)"
  java -Xshare:off -cp "$KAFKA_LIBS/*" kafka.tools.StorageTool format --cluster-id mkbcdsmkbcdsmkbcdsmkbc \
    --config "$dir/server.properties" >"$dir/log" 2>&1 &&
    {
      java -Xmx512m -XX:ArchiveClassesAtExit="$jsa.tmp" -Dlog4j2.configurationFile="$KAFKA_LOG4J" \
        -cp "$KAFKA_LIBS/*" kafka.Kafka "$dir/server.properties" >>"$dir/log" 2>&1 &
      pid=$!
      for ((i = 0; i < 1200; i++)); do
        grep -q "Kafka Server started" "$dir/log" && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    }
  if [[ -s $jsa.tmp ]] && java -XX:SharedArchiveFile="$jsa.tmp" -Xshare:on -cp "$KAFKA_LIBS/*" \
    -version >/dev/null 2>&1; then
    mv -f "$jsa.tmp" "$jsa"
    say "class-data archive ready ($(du -h "$jsa" | cut -f1))"
  else
    rm -f "$jsa.tmp"
    : >"$jsa.failed"
    say "warning: no class-data archive (brokers start without it; delete $jsa.failed to try again); see $dir/log"
    return 0
  fi
  rm -rf "$dir"
}
