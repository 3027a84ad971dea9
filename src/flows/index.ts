/**
 * Flows between contexts (design/FLOWS.md): process managers that listen to one context's events and
 * call other contexts' ports. No context imports them; only the composition registers them.
 */
export { CheckoutCompletion, type CompletionCommands, completionPorts } from "./checkoutCompletion.js"
