// The official @azure/service-bus client left idle past aiosb serve's idle timeout: send,
// sit idle for the given seconds, send again, receive both. Prints the bodies as JSON.
import { ServiceBusClient } from "@azure/service-bus";

const [connection, queue, idleSeconds] = process.argv.slice(2);
const client = new ServiceBusClient(connection);
try {
  const sender = client.createSender(queue);
  await sender.sendMessages({ body: "before" });
  await new Promise((resolve) => setTimeout(resolve, Number(idleSeconds) * 1000));
  await sender.sendMessages({ body: "after" });
  await sender.close();
  const receiver = client.createReceiver(queue, { receiveMode: "receiveAndDelete" });
  const got = await receiver.receiveMessages(10, { maxWaitTimeInMs: 3000 });
  await receiver.close();
  console.log(JSON.stringify(got.map((m) => m.body)));
} finally {
  await client.close();
}
