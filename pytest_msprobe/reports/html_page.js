// The page's own behaviour: figures drawn (the step at once, the rest when near the screen),
// tables sorted by a click on a column's head, the entries filtered by status and text.
(function(){
document.addEventListener('DOMContentLoaded',function(){
 var box=document.getElementById('script-errors');
 window.msprobeErrors.forEach(function(t){var l=document.createElement('div');l.className='script-error';l.textContent=t;box.appendChild(l);box.hidden=false;});
});
function draw(){
 var figures=JSON.parse(document.getElementById('msprobe-figures').textContent);
 var divs=Array.prototype.slice.call(document.querySelectorAll('div.fig[data-fig]'));
 function plot(div){
  if(div.getAttribute('data-drawn'))return;div.setAttribute('data-drawn','pending');
  var spec=figures[Number(div.getAttribute('data-fig'))];
  try{Plotly.newPlot(div,spec.data,spec.layout,{responsive:true,displaylogo:false}).then(
   function(){div.setAttribute('data-drawn','1');},function(e){msprobeError(e);});}
  catch(e){msprobeError(e);}
 }
 // The step at once; an output's figures as they come near the screen: a page of many
 // failures opens as fast as one of a few (bench/html_report.md).
 divs.filter(function(d){return d.classList.contains('step');}).forEach(plot);
 var rest=divs.filter(function(d){return !d.classList.contains('step');});
 if('IntersectionObserver' in window){
  var seen=new IntersectionObserver(function(changes){changes.forEach(function(c){
   if(c.isIntersecting){seen.unobserve(c.target);plot(c.target);}});},{rootMargin:'400px'});
  rest.forEach(function(d){seen.observe(d);});
 }else{rest.forEach(plot);}
}
function cellValue(row,i){var c=row.cells[i];var v=c.getAttribute('data-v');if(v===null)v=c.textContent;var n=parseFloat(v);
 return (v!==''&&!isNaN(n)&&/^[-+0-9.einfINF]+$/.test(v))?n:(v==='inf'?Infinity:(v==='-inf'?-Infinity:v.toLowerCase()));}
function sortable(table){
 var heads=table.tHead.rows[0].cells;
 Array.prototype.forEach.call(heads,function(th,i){th.addEventListener('click',function(){
  var asc=!th.classList.contains('asc');
  Array.prototype.forEach.call(heads,function(h){h.classList.remove('asc','desc');});th.classList.add(asc?'asc':'desc');
  var body=table.tBodies[0],rows=Array.prototype.slice.call(body.rows);
  rows.sort(function(a,b){var x=cellValue(a,i),y=cellValue(b,i);
   if(typeof x!==typeof y){x=String(x);y=String(y);}return (x<y?-1:x>y?1:0)*(asc?1:-1);});
  rows.forEach(function(r){body.appendChild(r);});
 });});
}
function filter(){
 var status=document.getElementById('status-filter').value,text=document.getElementById('text-filter').value.toLowerCase();
 var rows=document.getElementById('entry-table').tBodies[0].rows,shown=0;
 Array.prototype.forEach.call(rows,function(r){var s=r.getAttribute('data-status');
  var ok=(!status||(status==='not-pass'?s!=='pass':s===status))&&(!text||r.textContent.toLowerCase().indexOf(text)>=0);
  r.hidden=!ok;if(ok)shown++;});
 document.getElementById('shown-count').textContent=shown+' of '+rows.length+' entries';
}
document.querySelectorAll('table.sortable').forEach(sortable);
document.getElementById('status-filter').addEventListener('change',filter);
document.getElementById('text-filter').addEventListener('input',filter);
filter();
if(typeof Plotly==='undefined'){msprobeError('plotly.js did not load');}else{draw();}
})();
