/**
 * The events context's public face: the rule by which public events leave the service without
 * their secret fields (so a later delivery path can apply the same one). Nothing else of `events/`
 * is imported from outside it; the feed itself is HTTP only.
 */
export { isSecretField, redactSecrets } from "./redaction.js"
