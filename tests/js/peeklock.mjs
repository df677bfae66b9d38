// The official @azure/service-bus client against aiosb serve: send 5 messages, receive
// them in peek-lock mode, complete 4 and abandon 1 (it comes back, delivered once before).
import { ServiceBusClient } from "@azure/service-bus";

const [connection, queue] = process.argv.slice(2);
const client = new ServiceBusClient(connection);
try {
  const sender = client.createSender(queue);
  await sender.sendMessages([0, 1, 2, 3, 4].map((i) => ({ body: `p${i}` })));
  await sender.close();
  const receiver = client.createReceiver(queue);
  const first = await receiver.receiveMessages(5, { maxWaitTimeInMs: 3000 });
  for (const m of first) {
    if (m.body === "p2") await receiver.abandonMessage(m);
    else await receiver.completeMessage(m);
  }
  const again = await receiver.receiveMessages(5, { maxWaitTimeInMs: 3000 });
  for (const m of again) await receiver.completeMessage(m);
  await receiver.close();
  console.log(JSON.stringify({
    first: first.map((m) => m.body), again: again.map((m) => [m.body, m.deliveryCount]),
  }));
} finally {
  await client.close();
}
