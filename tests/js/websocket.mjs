// The official @azure/service-bus client over AMQP over WebSockets (what users behind a
// firewall or proxy take), against aiosb serve: an upgrade at /$servicebus/websocket of
// the address given (Azure's 443; here aiosb serve's AMQP port, which answers HTTPS).
// Sends, receives and completes; prints what it received as JSON.
import { ServiceBusClient } from "@azure/service-bus";
import WebSocket from "ws";

const [connection, queue, endpoint] = process.argv.slice(2);
const client = new ServiceBusClient(connection, {
  webSocketOptions: { webSocket: WebSocket },
  customEndpointAddress: endpoint,
});
try {
  const sender = client.createSender(queue);
  await sender.sendMessages([1, 2, 3].map((i) => ({ body: `ws ${i}`, messageId: `w${i}` })));
  await sender.close();
  const receiver = client.createReceiver(queue);
  const got = [];
  while (got.length < 3) {
    const some = await receiver.receiveMessages(10, { maxWaitTimeInMs: 3000 });
    if (some.length === 0) break;
    for (const m of some) await receiver.completeMessage(m);
    got.push(...some);
  }
  await receiver.close();
  console.log(JSON.stringify(got.map((m) => m.body)));
} finally {
  await client.close();
}
