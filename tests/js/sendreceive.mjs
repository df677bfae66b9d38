// The official @azure/service-bus client against aiosb serve: send one message and a
// batch, then receive them in receive-and-delete mode. Prints what it received as JSON.
import { ServiceBusClient } from "@azure/service-bus";

const [connection, queue] = process.argv.slice(2);
const client = new ServiceBusClient(connection);
try {
  const sender = client.createSender(queue);
  await sender.sendMessages({ body: "from node", subject: "js", applicationProperties: { n: 7 } });
  const batch = await sender.createMessageBatch();
  for (let i = 0; i < 10; i++) batch.tryAddMessage({ body: `b${i}`, messageId: `m${i}` });
  await sender.sendMessages(batch);
  await sender.close();
  const receiver = client.createReceiver(queue, { receiveMode: "receiveAndDelete" });
  const got = [];
  while (got.length < 11) {
    const some = await receiver.receiveMessages(20, { maxWaitTimeInMs: 3000 });
    if (some.length === 0) break;
    got.push(...some);
  }
  await receiver.close();
  console.log(JSON.stringify(got.map((m) => ({
    body: m.body, subject: m.subject ?? null, messageId: m.messageId ?? null,
    n: m.applicationProperties?.n ?? null,
  }))));
} finally {
  await client.close();
}
