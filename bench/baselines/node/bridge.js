// Baseline: a MongoDB change stream -> Kafka bridge as a competent user writes it in Node.js,
// with the official `mongodb` driver and `kafkajs`. Used by scripts/bench side by side with the
// real bridge; deliberately small:
// - one change stream on one collection, resumed (`startAfter`) from a token saved in MongoDB;
// - events collected in batches (up to --batch events, --max-batch-bytes (one send is one record
//   batch, which the broker caps at 1 MB), or --max-batch-ms, or until the stream has nothing
//   more), sent with ONE `producer.send` per batch: key = documentKey (canonical
//   Extended JSON), value = the whole event (relaxed Extended JSON, `EJSON.stringify`);
// - idempotent producer, acks=all (-1); the batch's resume token is saved after `send` resolved,
//   so the token never passes an undelivered event.
// kafkajs has no built-in lz4: compression is none unless --compression gzip.
// `--init` opens the stream, saves its initial token and exits. SIGTERM/SIGINT: finish, exit 0.
'use strict';

const { MongoClient, BSON } = require('mongodb');
const { Kafka, CompressionTypes, logLevel } = require('kafkajs');

function parseArgs(argv) {
  const args = { offsetsDb: 'bench_baselines', batch: 1000, maxBatchBytes: 900000, maxBatchMs: 20, compression: 'none', init: false };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--init') { args.init = true; continue; }
    const key = a.replace(/^--/, '').replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    args[key] = argv[++i];
  }
  for (const k of ['uri', 'bootstrap', 'db', 'coll', 'topic', 'name']) {
    if (!args[k]) throw new Error(`--${k} is required`);
  }
  args.batch = Number(args.batch);
  args.maxBatchMs = Number(args.maxBatchMs);
  args.maxBatchBytes = Number(args.maxBatchBytes);
  return args;
}

async function main() {
  const args = parseArgs(process.argv);
  const client = new MongoClient(args.uri);
  await client.connect();
  const offsets = client.db(args.offsetsDb).collection('offsets');
  const coll = client.db(args.db).collection(args.coll);

  if (args.init) {
    const stream = coll.watch([], { maxAwaitTimeMS: 100 });
    while (stream.resumeToken == null) {
      if ((await stream.tryNext()) != null) throw new Error('the collection is being written to; --init before the load');
    }
    await offsets.replaceOne({ _id: args.name }, { _id: args.name, token: stream.resumeToken }, { upsert: true });
    await stream.close();
    await client.close();
    return;
  }

  let stop = false;
  process.on('SIGTERM', () => { stop = true; });
  process.on('SIGINT', () => { stop = true; });

  const kafka = new Kafka({ clientId: 'baseline-node', brokers: args.bootstrap.split(','), logLevel: logLevel.ERROR });
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const compression = args.compression === 'gzip' ? CompressionTypes.GZIP : CompressionTypes.None;

  const saved = await offsets.findOne({ _id: args.name });
  const options = { maxAwaitTimeMS: 100 };
  if (saved) options.startAfter = saved.token;
  const stream = coll.watch([], options);
  while (!stop) {
    const messages = [];
    let bytes = 0;
    const started = Date.now();
    let change = await stream.tryNext();
    while (change != null) {
      const message = {
        key: BSON.EJSON.stringify(change.documentKey, { relaxed: false }),
        value: BSON.EJSON.stringify(change, { relaxed: true }),
      };
      messages.push(message);
      bytes += message.key.length + message.value.length;
      // One send is one record batch: keep it under the broker's 1 MB message.max.bytes.
      if (messages.length >= args.batch || bytes >= args.maxBatchBytes || Date.now() - started >= args.maxBatchMs) break;
      change = await stream.tryNext();
    }
    if (messages.length === 0) continue;
    await producer.send({ topic: args.topic, acks: -1, compression, messages });
    await offsets.updateOne({ _id: args.name }, { $set: { token: stream.resumeToken } }, { upsert: true });
  }
  await stream.close();
  await producer.disconnect();
  await client.close();
}

main().catch((e) => { console.error(e); process.exit(1); });
