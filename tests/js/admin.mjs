// The official @azure/service-bus administration client against aiosb serve over HTTPS
// (the certificate trusted through NODE_EXTRA_CA_CERTS). Prints what it saw as JSON.
import { ServiceBusAdministrationClient } from "@azure/service-bus";

const [connection] = process.argv.slice(2);
const admin = new ServiceBusAdministrationClient(connection);
const queue = await admin.createQueue("jsorders", { maxDeliveryCount: 4 });
await admin.createTopic("jsevents");
await admin.createSubscription("jsevents", "audit");
await admin.createRule("jsevents", "audit", "eu", { sqlExpression: "region = 'eu'" });
const rules = [];
for await (const rule of admin.listRules("jsevents", "audit")) rules.push(rule.name);
const queues = [];
for await (const q of admin.listQueues()) queues.push(q.name);
const counts = await admin.getQueueRuntimeProperties("jsorders");
const info = await admin.getNamespaceProperties();
await admin.deleteQueue("jsorders");
console.log(JSON.stringify({
  maxDeliveryCount: queue.maxDeliveryCount, queues, rules,
  active: counts.activeMessageCount, namespace: info.name,
}));
