// The official @azure/service-bus client against aiosb serve, on an entity that does not
// exist: a send (the link is refused) and a peek (a $management request). Prints, for
// each, the error's code, whether the SDK took it as retryable, and the milliseconds it
// took, as JSON.
import { ServiceBusClient } from "@azure/service-bus";

const [connection, queue] = process.argv.slice(2);
const client = new ServiceBusClient(connection, { retryOptions: { maxRetries: 2, retryDelayInMs: 500 } });
const failure = async (work) => {
  const start = Date.now();
  try {
    await work();
    return { code: null, ms: Date.now() - start };
  } catch (e) {
    return { code: e.code ?? e.name, retryable: e.retryable ?? null, message: e.message, ms: Date.now() - start };
  }
};
try {
  const sender = client.createSender(queue);
  const send = await failure(() => sender.sendMessages({ body: "lost?" }));
  const receiver = client.createReceiver(queue);
  const peek = await failure(() => receiver.peekMessages(1));
  console.log(JSON.stringify({ send, peek }));
} finally {
  await client.close();
}
