package programs

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
	"golang.org/x/tools/go/types/typeutil"
)

// Site is one place in the code that starts (or looks up) a program.
type Site struct {
	Pos  token.Position
	Func string // the enclosing function, for messages
	Expr string // the source of the program expression
	// Programs are the names the expression can take; empty when the scan
	// could not tell (Unresolved says why).
	Programs   []string
	Unresolved string
}

func (s Site) String() string {
	if s.Unresolved != "" {
		return fmt.Sprintf("%s: in %s: cannot tell which program %s runs: %s", s.Pos, s.Func, s.Expr, s.Unresolved)
	}
	return fmt.Sprintf("%s: in %s: %s runs %s", s.Pos, s.Func, s.Expr, strings.Join(s.Programs, ", "))
}

// sinks are the functions that start or look up a program, by their
// types.Func full name, with the index of the argument naming the program.
// The scan adds the functions that pass a parameter on to one of them.
var sinks = map[string]int{
	"os/exec.Command":                0,
	"os/exec.CommandContext":         1,
	"os/exec.LookPath":               0,
	"os.StartProcess":                0,
	"syscall.Exec":                   0,
	"syscall.ForkExec":               0,
	"golang.org/x/sys/unix.Exec":     0,
	"golang.org/x/sys/unix.ForkExec": 0,
}

// Producers tell the scan what it cannot read from the source, by full
// name: the program names a function returns (lab.KproxyBinary: "kproxy"),
// or every value of a named string type (kernel.Backend: "nft", "legacy"),
// so names computed from such values can be evaluated. The caller computes
// them from the real code.
type Producers map[string][]string

// Scan loads the packages (with their tests) under dir matching patterns and
// returns every site that starts a program, directly or through a function
// that passes one of its parameters on as the program (found by the scan).
func Scan(dir string, producers Producers, patterns ...string) ([]Site, error) {
	cfg := &packages.Config{
		Mode:  packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
		Dir:   dir,
		Tests: true,
	}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", strings.Join(patterns, " "), err)
	}
	var errs []string
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		for _, e := range p.Errors {
			errs = append(errs, e.Error())
		}
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("loading %s: %s", strings.Join(patterns, " "), strings.Join(errs, "; "))
	}
	s := &scanner{pkgs: pkgs, producers: producers, sinks: map[string]int{}}
	for k, v := range sinks {
		s.sinks[k] = v
	}
	// Each pass may find new wrappers; the calls to them are sites too.
	for {
		before := len(s.sinks)
		s.pass(false)
		if len(s.sinks) == before {
			break
		}
	}
	s.pass(true)
	sort.Slice(s.sites, func(i, j int) bool {
		a, b := s.sites[i].Pos, s.sites[j].Pos
		if a.Filename != b.Filename {
			return a.Filename < b.Filename
		}
		return a.Offset < b.Offset
	})
	return s.sites, nil
}

type scanner struct {
	pkgs      []*packages.Package
	producers Producers
	sinks     map[string]int // full function name → program argument index
	// bound holds, while a variable's self-referring assignments are
	// evaluated, the values it had before them.
	bound map[*types.Var][]string
	sites []Site
	seen  map[token.Position]bool
}

// fnCtx is the function declaration a call sits in.
type fnCtx struct {
	pkg  *packages.Package
	decl *ast.FuncDecl // nil in a package-level declaration
	// scope is decl, or the package-level declaration (a function literal
	// in a var's initializer) the call sits in.
	scope ast.Node
	// args resolves the caller's argument for parameter i while a callee's
	// returns are evaluated; nil at a call site.
	args func(i, depth int) resolution
}

func (s *scanner) pass(record bool) {
	s.seen = map[token.Position]bool{}
	for _, p := range s.pkgs {
		for _, f := range p.Syntax {
			for _, d := range f.Decls {
				ctx := fnCtx{pkg: p, scope: d}
				if fd, ok := d.(*ast.FuncDecl); ok {
					ctx.decl = fd
				}
				ast.Inspect(d, func(n ast.Node) bool {
					if call, ok := n.(*ast.CallExpr); ok {
						s.call(ctx, call, record)
					}
					return true
				})
			}
		}
	}
}

func (s *scanner) call(ctx fnCtx, call *ast.CallExpr, record bool) {
	callee, ok := typeutil.Callee(ctx.pkg.TypesInfo, call).(*types.Func)
	if !ok {
		return
	}
	idx, ok := s.sinks[callee.FullName()]
	if !ok || idx >= len(call.Args) {
		return
	}
	r := base(s.resolve(ctx, call.Args[idx], 0))
	if r.param >= 0 {
		s.addWrapper(ctx, r.param)
		return
	}
	if !record {
		return
	}
	pos := ctx.pkg.Fset.Position(call.Pos())
	if s.seen[pos] {
		return
	}
	s.seen[pos] = true
	site := Site{Pos: pos, Func: ctx.name(), Expr: types.ExprString(call.Args[idx]), Unresolved: r.unresolved}
	if r.unresolved == "" {
		site.Programs = r.names
		site.Programs = append(site.Programs, s.launched(ctx, callee, call, idx, r.names)...)
	}
	s.sites = append(s.sites, site)
}

// launched returns what a launcher in names runs, when its arguments are
// constants given one by one.
func (s *scanner) launched(ctx fnCtx, callee *types.Func, call *ast.CallExpr, idx int, names []string) []string {
	if strings.HasSuffix(callee.FullName(), "LookPath") || call.Ellipsis.IsValid() {
		return nil
	}
	var args []string
	for _, a := range call.Args[idx+1:] {
		tv := ctx.pkg.TypesInfo.Types[a]
		if tv.Value == nil || tv.Value.Kind() != constant.String {
			break
		}
		args = append(args, constant.StringVal(tv.Value))
	}
	var out []string
	for _, n := range names {
		if launch, ok := launchers[n]; ok {
			out = append(out, launch(args)...)
		}
	}
	return out
}

// addWrapper records that ctx's function passes its parameter i on as a
// program, and so do the interface methods a concrete method satisfies.
func (s *scanner) addWrapper(ctx fnCtx, i int) {
	if ctx.decl == nil {
		return
	}
	obj, ok := ctx.pkg.TypesInfo.Defs[ctx.decl.Name].(*types.Func)
	if !ok {
		return
	}
	s.sinks[obj.FullName()] = i
	recv := obj.Type().(*types.Signature).Recv()
	if recv == nil {
		return
	}
	for _, p := range s.pkgs {
		scope := p.Types.Scope()
		for _, name := range scope.Names() {
			tn, ok := scope.Lookup(name).(*types.TypeName)
			if !ok {
				continue
			}
			iface, ok := tn.Type().Underlying().(*types.Interface)
			if !ok {
				continue
			}
			for m := 0; m < iface.NumMethods(); m++ {
				im := iface.Method(m)
				if im.Name() == obj.Name() && implementsByName(recv.Type(), iface) {
					s.sinks[im.FullName()] = i
				}
			}
		}
	}
}

// implementsByName reports whether t (or *t) has every method of iface by
// name and parameter count: package variants loaded for tests give the same
// types distinct identities, so types.Implements would miss them.
func implementsByName(t types.Type, iface *types.Interface) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	ms := types.NewMethodSet(types.NewPointer(t))
	for m := 0; m < iface.NumMethods(); m++ {
		im := iface.Method(m)
		sel := lookupByName(ms, im.Name())
		if sel == nil {
			return false
		}
		if sel.Type().(*types.Signature).Params().Len() != im.Type().(*types.Signature).Params().Len() {
			return false
		}
	}
	return true
}

func lookupByName(ms *types.MethodSet, name string) *types.Selection {
	for i := 0; i < ms.Len(); i++ {
		if ms.At(i).Obj().Name() == name {
			return ms.At(i)
		}
	}
	return nil
}

// name names the function for messages.
func (c fnCtx) name() string {
	d := c.decl
	if d == nil {
		return "a package-level declaration"
	}
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	return fmt.Sprintf("(%s).%s", types.ExprString(d.Recv.List[0].Type), d.Name.Name)
}
