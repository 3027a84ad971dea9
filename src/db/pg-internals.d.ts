/**
 * The one function of pg's internals that PipelinedStatements.ts uses: how pg turns a JS parameter
 * into its wire text (dates, arrays, buffers, JSON), so a statement sent ahead binds its values
 * exactly as pg binds any other. `pg/lib/*` is in pg's export map.
 */
declare module "pg/lib/utils.js" {
  const utils: { readonly prepareValue: (value: unknown) => Buffer | string | null }
  export default utils
}
