// rhea, an AMQP 1.0 client by the specification (#47), in its own simple pattern: a
// sender that sends while it has credit and counts its messages accepted, then a
// receiver that accepts each message it takes.
//   node rhea.mjs PORT QUEUE COUNT plain KEY_NAME KEY   (SASL PLAIN with a key)
//   node rhea.mjs PORT QUEUE COUNT cbs AUDIENCE TOKEN   (ANONYMOUS, then a $cbs put-token)
// Prints {accepted, received, roles, status} as JSON: roles are the roles of the server's
// answering attaches, as rhea received them (true: receiver).
import rhea from "rhea";

const [port, queue, countText, mode, first, second] = process.argv.slice(2);
const count = Number(countText);
const container = rhea.create_container();
const login = mode === "plain" ? { username: first, password: second } : {};
const connection = container.connect({ host: "127.0.0.1", port: Number(port), reconnect: false, ...login });
const result = { accepted: 0, received: [], roles: {}, status: null };

const timer = setTimeout(() => fail(`timed out: ${JSON.stringify(result)}`), 60000);

function fail(why) {
  console.error(why);
  process.exit(1);
}

for (const event of ["connection_error", "sender_error", "receiver_error", "protocol_error", "error"]) {
  connection.on(event, (context) => {
    const error = context.error ?? context.connection?.error ?? context.sender?.error ?? context.receiver?.error;
    fail(`${event}: ${error?.condition ?? ""} ${error?.description ?? error ?? ""}`);
  });
}
connection.on("disconnected", (context) => {
  if (result.received.length < count) fail(`disconnected: ${context.error ?? ""}`);
});

function putToken(audience, token) {
  return new Promise((resolve) => {
    const sender = connection.open_sender("$cbs");
    const receiver = connection.open_receiver("$cbs");
    receiver.on("message", (context) => {
      result.status = context.message.application_properties["status-code"];
      sender.close();
      receiver.close();
      resolve();
    });
    sender.once("sendable", () => {
      sender.send({
        message_id: "put-1", reply_to: "$cbs", body: token,
        application_properties: { operation: "put-token", type: "servicebus.windows.net:sastoken", name: audience },
      });
    });
  });
}

function sendAll() {
  return new Promise((resolve) => {
    const sender = connection.open_sender(queue);
    let sent = 0;
    sender.on("sender_open", (context) => { result.roles.sender = context.sender.remote.attach.role; });
    sender.on("sendable", () => {
      while (sender.sendable() && sent < count) {
        sender.send({ message_id: `m${sent}`, body: `rhea ${sent}` });
        sent += 1;
      }
    });
    sender.on("accepted", () => {
      result.accepted += 1;
      if (result.accepted === count) {
        sender.close();
        resolve();
      }
    });
    sender.on("rejected", (context) => fail(`rejected: ${JSON.stringify(context.delivery.remote_state)}`));
  });
}

function receiveAll() {
  return new Promise((resolve) => {
    const receiver = connection.open_receiver({ source: queue, autoaccept: false });
    receiver.on("receiver_open", (context) => { result.roles.receiver = context.receiver.remote.attach.role; });
    receiver.on("message", (context) => {
      result.received.push(context.message.body);
      context.delivery.accept();
      if (result.received.length === count) resolve();
    });
  });
}

if (mode === "cbs") await putToken(first, second);
await sendAll();
await receiveAll();
connection.once("connection_close", () => {
  clearTimeout(timer);
  console.log(JSON.stringify(result));
  process.exit(0);
});
connection.close();
