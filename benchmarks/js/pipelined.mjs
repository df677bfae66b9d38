// The outside yardstick of ./dev bench amqp (#50): rhea, an AMQP 1.0 client that is not
// aiosb's code, driving aiosb serve the way a pipelining client does.
//
//   node pipelined.mjs CONNECTION_STRING QUEUE SEND_COUNT RECEIVE_COUNT [IN_FLIGHT]
//
// CONNECTION_STRING is the server's AMQP one (Endpoint=sb://HOST:PORT;SharedAccessKeyName=
// ...;SharedAccessKey=...): rhea signs in with SASL PLAIN, the key's name and the key.
// Two phases, each skipped when its count is 0:
//   send:    SEND_COUNT messages of 100 bytes (a data section, a uuid message id each, as
//            the official SDK sends them) on one sender link, up to IN_FLIGHT (default
//            1,000) in flight, until the server has accepted every one;
//   receive: RECEIVE_COUNT messages on one receiver link (peek-lock: rhea's default
//            unsettled receive, IN_FLIGHT credit, autoaccept), each accepted.
// IN_FLIGHT 1 is a client one message at a time, like for like with the official SDK's
// one-at-a-time patterns (each send awaited; each message received and accepted before
// the next is granted).
// Before each phase the link is open (the sender has its credit) and the script prints
// {"ready": PHASE} and waits for a line on its standard input, so the caller can read the
// server's CPU just then; after it, once the link is closed (the server has answered the
// detach, so it has handled every disposition before it), it prints {"phase", "count",
// "seconds", "client_cpu_seconds"}, and "most_in_flight" (sent, not yet accepted: at most
// IN_FLIGHT) after sending, "credit" after receiving. At the end it prints {"done": true}
// and exits 0.
// Anything else fails loudly: a refused sign-in or link, an outcome other than accepted,
// no progress for IDLE_SECONDS (env RHEA_IDLE_SECONDS, default 30), standard input closed
// early: a message on stderr and exit status 1.
import { randomUUID } from "node:crypto";
import readline from "node:readline";
import rhea from "rhea";

const BODY = Buffer.alloc(100, "x");
const IDLE_SECONDS = Number(process.env.RHEA_IDLE_SECONDS ?? 30);

const [connectionString, queue, sendText, receiveText, inFlightText] = process.argv.slice(2);
const sendCount = Number(sendText);
const receiveCount = Number(receiveText);
const IN_FLIGHT = Number(inFlightText ?? 1000);
const CREDIT = IN_FLIGHT;
if (!connectionString || !queue || !Number.isInteger(sendCount) || !Number.isInteger(receiveCount)
    || !Number.isInteger(IN_FLIGHT) || IN_FLIGHT < 1) {
  fail("usage: node pipelined.mjs CONNECTION_STRING QUEUE SEND_COUNT RECEIVE_COUNT [IN_FLIGHT]");
}

function fail(why) {
  console.error(`rhea yardstick: ${why}`);
  process.exit(1);
}

function say(what) {
  process.stdout.write(`${JSON.stringify(what)}\n`);
}

function parse(text) {
  const fields = Object.fromEntries(text.split(";").filter(Boolean).map((part) => {
    const at = part.indexOf("=");
    return [part.slice(0, at).toLowerCase(), part.slice(at + 1)];
  }));
  const endpoint = new URL(fields.endpoint.replace(/^sb:/, "amqp:"));
  return {
    host: endpoint.hostname, port: Number(endpoint.port || 5672),
    username: fields.sharedaccesskeyname, password: fields.sharedaccesskey,
  };
}

// Progress: a phase that stops moving for IDLE_SECONDS fails (never a silent hang).
let lastProgress = Date.now();
let waitingForCaller = false;
const watchdog = setInterval(() => {
  if (!waitingForCaller && Date.now() - lastProgress > IDLE_SECONDS * 1000) {
    fail(`no progress for ${IDLE_SECONDS} s`);
  }
}, 1000);

const input = readline.createInterface({ input: process.stdin });
const lines = input[Symbol.asyncIterator]();

async function go(phase) {
  say({ ready: phase });
  waitingForCaller = true;
  const line = await lines.next();
  waitingForCaller = false;
  lastProgress = Date.now();
  if (line.done) fail(`standard input closed before the ${phase} phase`);
}

const { host, port, username, password } = parse(connectionString);
const container = rhea.create_container();
const connection = container.connect({ host, port, username, password, reconnect: false });
let finished = false;
for (const event of ["connection_error", "sender_error", "receiver_error", "session_error",
                     "protocol_error", "error"]) {
  connection.on(event, (context) => {
    const error = context.error ?? context.connection?.error ?? context.sender?.error
      ?? context.receiver?.error ?? context.session?.error;
    fail(`${event}: ${error?.condition ?? ""} ${error?.description ?? error ?? ""}`);
  });
}
connection.on("disconnected", (context) => {
  if (!finished) fail(`disconnected: ${context.error ?? "by the server"}`);
});

function measure(start) {
  const cpu = process.cpuUsage(start.cpu);
  return {
    seconds: Number(process.hrtime.bigint() - start.wall) / 1e9,
    client_cpu_seconds: (cpu.user + cpu.system) / 1e6,
  };
}

function closed(link) {
  return new Promise((resolve) => {
    link.once(link.is_sender() ? "sender_close" : "receiver_close", resolve);
    link.close();
  });
}

async function sendPhase(count) {
  const sender = connection.open_sender({ target: { address: queue } });
  await new Promise((resolve) => sender.once("sendable", resolve));
  await go("send");
  const start = { wall: process.hrtime.bigint(), cpu: process.cpuUsage() };
  let sent = 0;
  let accepted = 0;
  let mostInFlight = 0;
  const done = new Promise((resolve) => {
    const pump = () => {
      while (sent < count && sent - accepted < IN_FLIGHT && sender.sendable()) {
        sender.send({ message_id: randomUUID(), body: rhea.message.data_section(BODY) });
        sent += 1;
        mostInFlight = Math.max(mostInFlight, sent - accepted);
      }
    };
    sender.on("sendable", pump);
    sender.on("accepted", () => {
      accepted += 1;
      lastProgress = Date.now();
      if (accepted === count) resolve();
      else pump();
    });
    for (const outcome of ["rejected", "released", "modified"]) {
      sender.on(outcome, (context) => {
        fail(`message ${outcome}: ${JSON.stringify(context.delivery.remote_state ?? null)}`);
      });
    }
    pump();
  });
  await done;
  await closed(sender);
  say({ phase: "send", count, ...measure(start), most_in_flight: mostInFlight });
}

async function receivePhase(count) {
  await go("receive");
  const start = { wall: process.hrtime.bigint(), cpu: process.cpuUsage() };
  let received = 0;
  const receiver = connection.open_receiver({
    source: { address: queue }, credit_window: CREDIT, autoaccept: true,
  });
  await new Promise((resolve) => {
    receiver.on("message", () => {
      received += 1;
      lastProgress = Date.now();
      if (received === count) resolve();
    });
  });
  // rhea accepts each message once its handlers have run; the detach goes out after
  // those dispositions, and the server answers it only when it has handled them.
  await closed(receiver);
  if (received !== count) fail(`received ${received} of ${count}`);
  say({ phase: "receive", count, ...measure(start), credit: CREDIT });
}

await new Promise((resolve) => connection.once("connection_open", resolve));
if (sendCount > 0) await sendPhase(sendCount);
if (receiveCount > 0) await receivePhase(receiveCount);
finished = true;
clearInterval(watchdog);
input.close();
await new Promise((resolve) => {
  connection.once("connection_close", resolve);
  connection.close();
});
say({ done: true });
process.exit(0);
